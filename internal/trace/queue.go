package trace

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// queue is the span processor: a finished span is put in a bounded list
// without waiting (or is dropped and counted when it is full), and one
// goroutine sends batches to the exporter, each export bounded in time.
// The goroutine is woken when a batch is full, or by its ticker: not by
// every span, as a channel between them did (three times a gateway
// request, each a trip through the scheduler).
type queue struct {
	exp     batchExporter
	size    int
	batch   int
	every   time.Duration
	timeout time.Duration
	full    chan struct{}
	flush   chan chan struct{}
	stop    chan struct{}
	stopped chan struct{}
	once    sync.Once

	mu      sync.Mutex
	pending []item

	dropped  prometheus.Counter
	exported prometheus.Counter
	failed   prometheus.Counter
}

// item is a finished span: the SDK's, or a lean one's record.
type item struct {
	sdk  sdktrace.ReadOnlySpan
	lean *leanRecord
}

func (it item) resource() *resource.Resource {
	if it.lean != nil {
		return it.lean.tracer.p.res
	}
	return it.sdk.Resource()
}

func (it item) scope() instrumentation.Scope {
	if it.lean != nil {
		return it.lean.tracer.scope
	}
	return it.sdk.InstrumentationScope()
}

// done gives a lean span's record back, once exported or dropped.
func (it item) done() {
	if it.lean != nil {
		it.lean.release()
	}
}

// batchExporter sends a batch: modelserve's exporter, or the SDK's
// (sdkExporter) when the client is told to send JSON.
type batchExporter interface {
	export(context.Context, []item) error
	Shutdown(context.Context) error
}

// sdkExporter is the SDK's exporter, sent the SDK's spans of a batch:
// with it, every span is the SDK's (Tracing.HotTracer is its tracer).
type sdkExporter struct {
	sdktrace.SpanExporter
	spans []sdktrace.ReadOnlySpan
}

func (s *sdkExporter) export(ctx context.Context, batch []item) error {
	s.spans = s.spans[:0]
	for _, it := range batch {
		if it.sdk != nil {
			s.spans = append(s.spans, it.sdk)
		}
	}
	err := s.ExportSpans(ctx, s.spans)
	clear(s.spans)
	return err
}

func newQueue(exp batchExporter, o Options) *queue {
	if o.QueueSize <= 0 {
		o.QueueSize = 2048
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 512
	}
	if o.Every <= 0 {
		o.Every = time.Second
	}
	if o.ExportTimeout <= 0 {
		o.ExportTimeout = 10 * time.Second
	}
	q := &queue{
		exp: exp, size: o.QueueSize, batch: o.BatchSize, every: o.Every, timeout: o.ExportTimeout,
		pending: make([]item, 0, o.QueueSize),
		full:    make(chan struct{}, 1), flush: make(chan chan struct{}), stop: make(chan struct{}), stopped: make(chan struct{}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "modelserve_trace_spans_dropped_total", Help: "Finished spans not exported: the export queue was full (a collector down or slow), an export failed, or the process stopped first.",
		}),
		exported: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "modelserve_trace_spans_exported_total", Help: "Spans the collector took.",
		}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "modelserve_trace_exports_failed_total", Help: "Exports of a batch of spans that failed (their spans are counted dropped).",
		}),
	}
	go q.loop()
	return q
}

func (q *queue) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{q.dropped, q.exported, q.failed} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (q *queue) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (q *queue) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	q.add(item{sdk: s})
}

// add queues a finished span, or drops it when the queue is full.
func (q *queue) add(s item) {
	q.mu.Lock()
	if len(q.pending) == q.size {
		q.mu.Unlock()
		q.dropped.Inc()
		s.done()
		return
	}
	q.pending = append(q.pending, s)
	n := len(q.pending)
	q.mu.Unlock()
	if n == q.batch {
		select {
		case q.full <- struct{}{}:
		default: // woken already
		}
	}
}

// take moves up to a batch of the pending spans into buf.
func (q *queue) take(buf []item) []item {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(len(q.pending), q.batch)
	buf = append(buf[:0], q.pending[:n]...)
	rest := copy(q.pending, q.pending[n:])
	clear(q.pending[rest:])
	q.pending = q.pending[:rest]
	return buf
}

func (q *queue) loop() {
	defer close(q.stopped)
	tick := time.NewTicker(q.every)
	defer tick.Stop()
	buf := make([]item, 0, q.batch)
	send := func() {
		if len(buf) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), q.timeout)
		if err := q.exp.export(ctx, buf); err != nil {
			q.failed.Inc()
			q.dropped.Add(float64(len(buf)))
		} else {
			q.exported.Add(float64(len(buf)))
		}
		cancel()
		for _, it := range buf {
			it.done()
		}
		clear(buf)
		buf = buf[:0]
	}
	// batches sends whole batches while there are; drain sends all.
	batches := func() {
		for {
			if buf = q.take(buf); len(buf) < q.batch {
				return
			}
			send()
		}
	}
	drain := func() {
		for {
			if buf = q.take(buf); len(buf) == 0 {
				return
			}
			send()
		}
	}
	for {
		select {
		case <-q.full:
			batches()
		case <-tick.C:
			drain()
		case done := <-q.flush:
			drain()
			close(done)
		case <-q.stop:
			drain()
			return
		}
	}
}

// ForceFlush exports what is queued now, waiting at most until ctx ends.
func (q *queue) ForceFlush(ctx context.Context) error {
	done := make(chan struct{})
	select {
	case q.flush <- done:
	case <-q.stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown exports what is queued and stops, waiting at most until ctx
// ends; what is left then is counted dropped.
func (q *queue) Shutdown(ctx context.Context) error {
	q.once.Do(func() { close(q.stop) })
	select {
	case <-q.stopped:
	case <-ctx.Done():
		q.mu.Lock()
		q.dropped.Add(float64(len(q.pending)))
		q.mu.Unlock()
		return ctx.Err()
	}
	return q.exp.Shutdown(ctx)
}

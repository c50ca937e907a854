package trace

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Lean spans are for the part that traces every request it serves, the
// gateway: the same OpenTelemetry API as the SDK's spans, the same
// sampler, resource, queue and exporter, but each span's record is taken
// from those given back by spans exported before, and written straight
// into OTLP's encoding when its batch goes. The SDK's span cost a traced
// gateway request a new record for every span, a snapshot of it at its
// end and a map to deduplicate its attributes: BenchmarkTraceHooks
// measured 21 to 22 µs of CPU a request with the SDK's spans, 10 to 11
// with lean ones, their export included.
//
// What a lean span keeps follows the SDK's limits, from the same
// OTEL_SPAN_*_LIMIT, OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT and
// OTEL_LINK_ATTRIBUTE_COUNT_LIMIT variables (sdktrace.NewSpanLimits): its
// attributes (a key set again replaces its value), events and links (the
// oldest go first), each drop counted in the span, and its attributes'
// strings cut to the length limit. Nested lists and maps are kept as
// given: the gateway sets none.

// leanKept is the most attributes a record given back keeps room for: a
// span carrying many does not keep its room. A record's first
// leanInline are in the record itself.
const (
	leanKept   = 32
	leanInline = 16
)

// maxFree bounds the records kept for spans to come: what a full export
// queue (2048 by default) and the spans under way at once give back.
const maxFree = 4096

// leanProvider makes lean tracers. Its spans go to q, as the SDK's do,
// sampled by the same sampler.
type leanProvider struct {
	embedded.TracerProvider
	sampler sdktrace.Sampler
	res     *resource.Resource
	q       *queue
	limits  sdktrace.SpanLimits

	mu      sync.Mutex
	tracers map[instrumentation.Scope]*leanTracer
	// free are records given back, for spans to come: a record is out
	// for as long as its span waits for its batch, a second or more, and
	// in a sync.Pool it would be collected as garbage by then, under a
	// gateway's load many times over.
	freeMu sync.Mutex
	free   []*leanRecord
}

func newLeanProvider(sampler sdktrace.Sampler, res *resource.Resource, q *queue) *leanProvider {
	return &leanProvider{sampler: sampler, res: res, q: q, limits: sdktrace.NewSpanLimits(), tracers: map[instrumentation.Scope]*leanTracer{}}
}

// Tracer is the tracer of the named scope, one for each.
func (p *leanProvider) Tracer(name string, opts ...oteltrace.TracerOption) oteltrace.Tracer {
	c := oteltrace.NewTracerConfig(opts...)
	scope := instrumentation.Scope{Name: name, Version: c.InstrumentationVersion(), SchemaURL: c.SchemaURL(), Attributes: c.InstrumentationAttributes()}
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.tracers[scope]
	if !ok {
		t = &leanTracer{p: p, scope: scope}
		p.tracers[scope] = t
	}
	return t
}

type leanTracer struct {
	embedded.Tracer
	p     *leanProvider
	scope instrumentation.Scope
}

// record is an empty record, given back (release) once exported.
func (p *leanProvider) record() *leanRecord {
	p.freeMu.Lock()
	if n := len(p.free); n > 0 {
		r := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		p.freeMu.Unlock()
		return r
	}
	p.freeMu.Unlock()
	r := &leanRecord{}
	r.attrs = r.inline[:0]
	return r
}

// Start begins a span, a child of ctx's span, as the SDK's tracer does:
// the parent's trace or a new one, a new span ID, and the sampler's word
// on whether it is recorded and exported.
func (t *leanTracer) Start(ctx context.Context, name string, opts ...oteltrace.SpanStartOption) (context.Context, oteltrace.Span) {
	if ctx == nil {
		ctx = context.Background()
	}
	cfg := oteltrace.NewSpanStartConfig(opts...)
	var parent oteltrace.SpanContext
	sampleCtx := ctx
	if cfg.NewRoot() {
		sampleCtx = oteltrace.ContextWithSpanContext(ctx, parent)
	} else {
		parent = oteltrace.SpanContextFromContext(ctx)
	}
	tid := parent.TraceID()
	if !tid.IsValid() {
		tid = newTraceID()
	}
	res := t.p.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: sampleCtx, TraceID: tid, Name: name,
		Kind: cfg.SpanKind(), Attributes: cfg.Attributes(), Links: cfg.Links()})
	scc := oteltrace.SpanContextConfig{TraceID: tid, SpanID: newSpanID(), TraceState: res.Tracestate, TraceFlags: parent.TraceFlags() &^ oteltrace.FlagsSampled}
	if res.Decision == sdktrace.RecordAndSample {
		scc.TraceFlags |= oteltrace.FlagsSampled
	}
	s := &leanSpan{p: t.p, sc: oteltrace.NewSpanContext(scc)}
	if res.Decision != sdktrace.Drop {
		r := t.p.record()
		r.tracer = t
		r.name, r.kind, r.sc, r.parent = name, oteltrace.ValidateSpanKind(cfg.SpanKind()), s.sc, parent
		if r.start = cfg.Timestamp(); r.start.IsZero() {
			r.start = time.Now()
		}
		for _, l := range cfg.Links() {
			r.addLink(l)
		}
		r.setAttributes(res.Attributes)
		r.setAttributes(cfg.Attributes())
		s.r = r
	}
	return oteltrace.ContextWithSpan(ctx, s), s
}

// newTraceID and newSpanID are random IDs, never the invalid zero.
func newTraceID() oteltrace.TraceID {
	for {
		var id oteltrace.TraceID
		a, b := rand.Uint64(), rand.Uint64()
		for i := range 8 {
			id[i], id[8+i] = byte(a>>(8*i)), byte(b>>(8*i))
		}
		if id.IsValid() {
			return id
		}
	}
}

func newSpanID() oteltrace.SpanID {
	for {
		var id oteltrace.SpanID
		a := rand.Uint64()
		for i := range 8 {
			id[i] = byte(a >> (8 * i))
		}
		if id.IsValid() {
			return id
		}
	}
}

// leanSpan is a span of a lean tracer. Its record is its own until it
// ends; then the queue's, and the pool's once exported: a span ended, or
// never recorded, has none, and what is asked of it changes nothing.
type leanSpan struct {
	embedded.Span
	p  *leanProvider
	sc oteltrace.SpanContext

	mu sync.Mutex
	r  *leanRecord
}

// leanRecord is what a lean span records, written out by the exporter.
type leanRecord struct {
	spanView
	tracer *leanTracer
	inline [leanInline]attribute.KeyValue
}

func (s *leanSpan) SpanContext() oteltrace.SpanContext { return s.sc }

func (s *leanSpan) TracerProvider() oteltrace.TracerProvider { return s.p }

func (s *leanSpan) IsRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r != nil
}

// End ends the span (at the option's time, else now) and queues it for
// export; a span ends once.
func (s *leanSpan) End(opts ...oteltrace.SpanEndOption) {
	end := time.Now()
	s.mu.Lock()
	r := s.r
	s.r = nil
	s.mu.Unlock()
	if r == nil {
		return
	}
	if c := oteltrace.NewSpanEndConfig(opts...); !c.Timestamp().IsZero() {
		r.end = c.Timestamp()
	} else {
		// From the start's monotonic clock, as the SDK measures it: a
		// span never lasts less than nothing.
		r.end = r.start.Add(end.Sub(r.start))
	}
	if !r.sc.IsSampled() { // recorded, not to be exported (RecordOnly)
		r.release()
		return
	}
	s.p.q.add(item{lean: r})
}

func (s *leanSpan) SetAttributes(kv ...attribute.KeyValue) {
	if len(kv) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.r != nil {
		s.r.setAttributes(kv)
	}
}

func (s *leanSpan) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// As the SDK: Ok wins over Error, Error over Unset, and only an
	// Error has a description.
	if s.r == nil || s.r.status.Code > code {
		return
	}
	s.r.status = sdktrace.Status{Code: code}
	if code == codes.Error {
		s.r.status.Description = description
	}
}

func (s *leanSpan) SetName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.r != nil {
		s.r.name = name
	}
}

func (s *leanSpan) AddEvent(name string, opts ...oteltrace.EventOption) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.r != nil {
		s.r.addEvent(name, opts...)
	}
}

// RecordError adds an exception event for err, as the SDK's does.
func (s *leanSpan) RecordError(err error, opts ...oteltrace.EventOption) {
	if err == nil {
		return
	}
	opts = append(opts, oteltrace.WithAttributes(attribute.String("exception.type", typeOf(err)), attribute.String("exception.message", err.Error())))
	s.AddEvent("exception", opts...)
}

// typeOf names err's type as the SDK does: package path and name.
func typeOf(err error) string {
	t := reflect.TypeOf(err)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return fmt.Sprintf("%s.%s", t.PkgPath(), t.Name())
}

func (s *leanSpan) AddLink(l oteltrace.Link) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.r != nil {
		s.r.addLink(l)
	}
}

// setAttributes sets kv: a key set already has its value replaced where
// it is, a new one is added while there is room, and an invalid one is
// dropped; each drop counted.
func (r *leanRecord) setAttributes(kv []attribute.KeyValue) {
	l := r.tracer.p.limits
	for _, a := range kv {
		if !a.Valid() {
			r.droppedAttrs++
			continue
		}
		a = truncated(l.AttributeValueLengthLimit, a)
		if i := indexOfKey(r.attrs, a.Key); i >= 0 {
			r.attrs[i] = a
		} else if l.AttributeCountLimit < 0 || len(r.attrs) < l.AttributeCountLimit {
			r.attrs = append(r.attrs, a)
		} else {
			r.droppedAttrs++
		}
	}
}

func indexOfKey(kv []attribute.KeyValue, k attribute.Key) int {
	for i := range kv {
		if kv[i].Key == k {
			return i
		}
	}
	return -1
}

// truncated is a with its strings (or bytes) cut to limit characters (a
// negative limit: as they are).
func truncated(limit int, a attribute.KeyValue) attribute.KeyValue {
	if limit < 0 {
		return a
	}
	switch a.Value.Type() {
	case attribute.STRING:
		if s := a.Value.AsString(); len(s) > limit {
			a.Value = attribute.StringValue(cut(limit, s))
		}
	case attribute.STRINGSLICE:
		ss, changed := a.Value.AsStringSlice(), false // a copy
		for i, s := range ss {
			if len(s) > limit {
				ss[i], changed = cut(limit, s), true
			}
		}
		if changed {
			a.Value = attribute.StringSliceValue(ss)
		}
	case attribute.BYTESLICE:
		if b := a.Value.AsByteSlice(); len(b) > limit {
			a.Value = attribute.ByteSliceValue(b[:limit])
		}
	}
	return a
}

// cut is s's first limit characters, its invalid bytes left out, as the
// SDK cuts a string longer than the limit.
func cut(limit int, s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "")
	}
	n := 0
	for i := range s {
		if n == limit {
			return s[:i]
		}
		n++
	}
	return s
}

// limitAttrs is attrs within limit, and how many it drops.
func limitAttrs(limit int, attrs []attribute.KeyValue) ([]attribute.KeyValue, int) {
	switch {
	case limit == 0:
		return nil, len(attrs)
	case limit > 0 && len(attrs) > limit:
		return attrs[:limit], len(attrs) - limit
	}
	return attrs, 0
}

// evict makes room for one more in a list of limit, the oldest going
// first; it says whether there is room at all.
func evict[T any](list []T, limit int, dropped *int) ([]T, bool) {
	switch {
	case limit == 0:
		*dropped++
		return list, false
	case limit > 0 && len(list) >= limit:
		*dropped++
		return append(list[:0], list[len(list)-limit+1:]...), true
	}
	return list, true
}

func (r *leanRecord) addEvent(name string, opts ...oteltrace.EventOption) {
	c := oteltrace.NewEventConfig(opts...)
	attrs, dropped := limitAttrs(r.tracer.p.limits.AttributePerEventCountLimit, c.Attributes())
	events, ok := evict(r.events, r.tracer.p.limits.EventCountLimit, &r.droppedEvents)
	if r.events = events; ok {
		r.events = append(r.events, sdktrace.Event{Name: name, Time: c.Timestamp(), Attributes: attrs, DroppedAttributeCount: dropped})
	}
}

func (r *leanRecord) addLink(l oteltrace.Link) {
	// A link to nothing, saying nothing, is no link, as to the SDK.
	if !l.SpanContext.IsValid() && len(l.Attributes) == 0 && l.SpanContext.TraceState().Len() == 0 {
		return
	}
	attrs, dropped := limitAttrs(r.tracer.p.limits.AttributePerLinkCountLimit, l.Attributes)
	links, ok := evict(r.links, r.tracer.p.limits.LinkCountLimit, &r.droppedLinks)
	if r.links = links; ok {
		r.links = append(r.links, sdktrace.Link{SpanContext: l.SpanContext, Attributes: attrs, DroppedAttributeCount: dropped})
	}
}

// release gives r back to its provider, emptied: nothing it held is kept
// alive, and a list grown past leanKept goes.
func (r *leanRecord) release() {
	p := r.tracer.p
	attrs := r.attrs
	clear(attrs)
	if cap(attrs) > leanKept {
		attrs = r.inline[:0]
	}
	r.spanView = spanView{attrs: attrs[:0]}
	r.tracer = nil
	p.freeMu.Lock()
	if len(p.free) < maxFree {
		p.free = append(p.free, r)
	}
	p.freeMu.Unlock()
}

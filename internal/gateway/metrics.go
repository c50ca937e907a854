package gateway

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the gateway's figures in /metrics, by model and replica.
// Every method is a no-op on a nil *metrics (no registry given).
type metrics struct {
	requests   *prometheus.CounterVec
	ttft       *prometheus.HistogramVec
	latency    *prometheus.HistogramVec
	tokens     *prometheus.CounterVec
	queue      *prometheus.GaugeVec
	coldStarts *prometheus.CounterVec
	coldTime   *prometheus.HistogramVec
	// recent is the last minute of each model's requests, for the
	// console (stats.go).
	recent *recent
}

// latencyBuckets run from a cached short answer to a long generation.
var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modelserve_gateway_requests_total",
			Help: "Gateway requests by model, replica and HTTP status (499: the client went away). Refused requests have no replica.",
		}, []string{"model", "replica", "status"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "modelserve_gateway_time_to_first_token_seconds", Buckets: latencyBuckets,
			Help: "From the request's arrival to the first bytes of the engine's answer (the first token of a stream).",
		}, []string{"model", "replica"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "modelserve_gateway_request_duration_seconds", Buckets: latencyBuckets,
			Help: "From the request's arrival to the end of the answer, waiting for a replica included.",
		}, []string{"model", "replica"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modelserve_gateway_tokens_total",
			Help: "Tokens of the answered requests, as the engine counted them: prompt, prompt_cached (taken from the engine's prompt cache) and completion.",
		}, []string{"model", "replica", "kind"}),
		queue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "modelserve_gateway_queue_depth",
			Help: "Requests waiting for a replica of the model: for a free slot, or for a replica to start.",
		}, []string{"model"}),
		coldStarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modelserve_gateway_cold_starts_total",
			Help: "Times a request found no replica of its model ready and waited for one to start.",
		}, []string{"model"}),
		coldTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "modelserve_gateway_cold_start_seconds", Buckets: []float64{.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
			Help: "From the first request that found no replica ready to a replica taking it.",
		}, []string{"model"}),
		recent: newRecent(),
	}
	for _, c := range []prometheus.Collector{m.requests, m.ttft, m.latency, m.tokens, m.queue, m.coldStarts, m.coldTime} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ending is what is known of a request as it ends.
type ending struct {
	// model is the catalog entry that served it (a canary's own name when
	// the split sent it there), or refused it; replica is empty for a
	// request no replica took.
	model, replica string
	status         int
	// start is when it arrived (zero for a refusal), first when the
	// answer's first bytes went out (zero when none did), end when it
	// ended (now, when zero).
	start, first, end time.Time
	// stream is whether the answer was an event stream.
	stream bool
	counts counts
}

// ended counts a request that ended: in /metrics, in the last minute's
// Traffic, and in the meters running on its model.
func (g *Gateway) ended(e ending) {
	if e.end.IsZero() {
		e.end = time.Now() // wall time, as start: a latency (Options.Clock)
	}
	g.metrics.done(e)
	g.meters.add(e)
}

// done counts a request that ended.
func (m *metrics) done(e ending) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(e.model, e.replica, strconv.Itoa(e.status)).Inc()
	if e.replica == "" || e.start.IsZero() {
		m.recent.done(e.model, e.status, 0, e.end)
		return
	}
	took := e.end.Sub(e.start)
	m.recent.done(e.model, e.status, took, e.end)
	if !e.first.IsZero() {
		m.ttft.WithLabelValues(e.model, e.replica).Observe(e.first.Sub(e.start).Seconds())
	}
	m.latency.WithLabelValues(e.model, e.replica).Observe(took.Seconds())
	c := e.counts
	for _, k := range [...]struct {
		kind string
		n    int
	}{{"prompt", c.prompt}, {"prompt_cached", c.cached}, {"completion", c.completion}} {
		if k.n > 0 {
			m.tokens.WithLabelValues(e.model, e.replica, k.kind).Add(float64(k.n))
		}
	}
}

func (m *metrics) queued(model string, delta int) {
	if m == nil {
		return
	}
	m.queue.WithLabelValues(model).Add(float64(delta))
}

func (m *metrics) coldStarted(model string, took time.Duration) {
	if m == nil {
		return
	}
	m.coldStarts.WithLabelValues(model).Inc()
	m.coldTime.WithLabelValues(model).Observe(took.Seconds())
}

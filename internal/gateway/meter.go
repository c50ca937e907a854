package gateway

import (
	"slices"
	"sync"
	"time"
)

// A canary is promoted or rolled back on how its requests fare beside its
// model's, over the same minutes. /metrics' counters are kept since the
// start and Traffic is the last minute, neither of which is "since the
// canary began"; a Meter is: it counts what one catalog entry serves from
// the moment it is started, in fixed memory however long it runs. With no
// meter running a request costs a map lookup under a lock.

// Measurement is what a catalog entry's requests did while a Meter ran.
type Measurement struct {
	// Since is when the meter started.
	Since time.Time
	// Requests are the requests the entry served that ended since, whether
	// the split sent them or they named it; Failed those that ended with a
	// status of 500 or more, found no room (429), or had no answer from its
	// replica (counted 502, even when its model then answered); Answered
	// those a replica answered. The same rules as Traffic's.
	Requests, Failed, Answered int
	// TTFTP50 and TTFTP95 are the median and 95th percentile time to first
	// token of the answered requests that had one (2xx), from their
	// arrival at the gateway, waiting for a replica included. A stream's
	// first token is its first event; a plain answer comes whole, so its
	// first token is placed the engine's generation time (its
	// timings.predicted_ms) before its end. Within a few percent (a
	// log-scale histogram).
	TTFTP50, TTFTP95 time.Duration
	// TokensPerSecond is the completion tokens of the answered requests
	// that reported them, over the time spent generating them, summed:
	// from the first token to the end.
	TokensPerSecond float64
}

// Meter counts the requests one catalog entry serves from Measure until
// Stop. Its methods are safe for concurrent use.
type Meter struct {
	meters *meters
	name   string
	since  time.Time

	mu                         sync.Mutex
	requests, failed, answered int
	ttft                       histogram
	tokens                     int
	generating                 time.Duration
}

// Measure starts counting the requests the catalog entry name serves (a
// model or a canary, by its catalog name), until the meter's Stop. Meters
// are independent of each other, several on one name included.
func (g *Gateway) Measure(name string) *Meter {
	// Wall time, as the ends of the requests it counts (Options.Clock).
	m := &Meter{meters: &g.meters, name: name, since: time.Now()}
	g.meters.mu.Lock()
	defer g.meters.mu.Unlock()
	if g.meters.byModel == nil {
		g.meters.byModel = map[string][]*Meter{}
	}
	// A new slice each time: add reads the list outside the lock.
	g.meters.byModel[name] = append(slices.Clip(g.meters.byModel[name]), m)
	return m
}

// Stop ends the counting; Read still says what was counted until then.
// Stopping again does nothing.
func (m *Meter) Stop() {
	ms := m.meters
	ms.mu.Lock()
	defer ms.mu.Unlock()
	list := slices.DeleteFunc(slices.Clone(ms.byModel[m.name]), func(o *Meter) bool { return o == m })
	if len(list) == 0 {
		delete(ms.byModel, m.name)
	} else {
		ms.byModel[m.name] = list
	}
}

// Read is what was counted so far.
func (m *Meter) Read() Measurement {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := Measurement{
		Since: m.since, Requests: m.requests, Failed: m.failed, Answered: m.answered,
		TTFTP50: m.ttft.quantile(.5), TTFTP95: m.ttft.quantile(.95),
	}
	if m.generating > 0 {
		out.TokensPerSecond = float64(m.tokens) / m.generating.Seconds()
	}
	return out
}

func (m *Meter) add(e ending) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests++
	if failedStatus(e.status) {
		m.failed++
	}
	if e.replica == "" || e.start.IsZero() || !answeredStatus(e.status) {
		return
	}
	m.answered++
	if e.status >= 300 || e.first.IsZero() {
		return
	}
	firstToken, generating := e.firstToken()
	m.ttft.add(firstToken.Sub(e.start))
	if generating > 0 && e.counts.completion > 0 {
		m.tokens += e.counts.completion
		m.generating += generating
	}
}

// firstToken is when the answer's first token came, as the gateway saw
// it, and how long the rest took (0 when not known): a stream's first
// event, then to its end; a plain answer the engine's generation time
// before its end, or its arrival when the engine did not say.
func (e ending) firstToken() (time.Time, time.Duration) {
	if e.stream {
		return e.first, e.end.Sub(e.first)
	}
	gen := e.counts.generating
	if gen <= 0 {
		return e.first, 0
	}
	at := e.end.Add(-gen)
	if at.Before(e.start) {
		at = e.start
	}
	return at, gen
}

// meters are the running Meters, by catalog name.
type meters struct {
	mu      sync.Mutex
	byModel map[string][]*Meter
}

// add counts e in the meters running on its model.
func (ms *meters) add(e ending) {
	ms.mu.Lock()
	list := ms.byModel[e.model]
	ms.mu.Unlock()
	for _, m := range list {
		m.add(e)
	}
}

// histogram counts durations in the log-scale slots of the Traffic
// window's latencies (latencySlot: 19% apart, from a millisecond to ten
// minutes): its size is fixed whatever it counts, and a quantile read from
// it is within a few percent.
type histogram struct {
	slots [latencySlots]int
	n     int
}

func (h *histogram) add(d time.Duration) {
	h.slots[latencySlot(d)]++
	h.n++
}

// quantile is the q-quantile of what was added; 0 for nothing.
func (h *histogram) quantile(q float64) time.Duration { return slotQuantile(h.slots[:], h.n, q) }

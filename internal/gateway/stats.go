package gateway

import (
	"math"
	"net/http"
	"sync"
	"time"
)

// The console's catalog page shows each model's request rate and latency
// now, which /metrics' counters and histograms, kept since the start,
// cannot say without a Prometheus to take their rates. The gateway keeps
// the last minute besides: per model, one slot a second of what ended in
// it. A request costs a map lookup and a few additions under a lock; a
// read adds up sixty slots.

// TrafficWindow is how far back Traffic looks.
const TrafficWindow = time.Minute

// Traffic is what a model's requests did in the last TrafficWindow.
type Traffic struct {
	// Requests are the requests that named the model and ended in the
	// window, answered or refused.
	Requests int
	// Failed are those of them that ended with a status of 500 or more, or
	// were refused for want of room (429).
	Failed int
	// Answered are those a replica answered, whose latency P50 is: from
	// arrival to the answer's end, waiting for a replica included; 0 when
	// none was answered.
	Answered int
	P50      time.Duration
}

// Traffic is each model's requests in the last TrafficWindow, by catalog
// name; a model with none there is missing. It is empty when the gateway
// keeps no metrics (Options.Metrics nil).
func (g *Gateway) Traffic() map[string]Traffic {
	if g.metrics == nil {
		return nil
	}
	return g.metrics.recent.read(time.Now()) // wall time, as the ends it counts (Options.Clock)
}

// latencySlots are the steps a latency is counted in: a quarter of a
// power of two each (19% apart), from a millisecond to ten minutes and
// beyond. A median read from them is within a few percent, which is all a
// page that says "p50 340 ms" needs.
const (
	latencySlots   = 80
	slotsPerDouble = 4
)

// recent is the last minute of every model's requests.
type recent struct {
	mu     sync.Mutex
	models map[string]*window
}

// window is one model's last minute, one slot per second, reused as the
// clock goes round.
type window struct {
	secs [60]second
}

type second struct {
	at               int64 // the Unix second the slot holds; older is stale
	requests, failed int32
	answered         int32
	latency          [latencySlots]int32
}

func newRecent() *recent { return &recent{models: map[string]*window{}} }

// done counts a request for model that ended now with status; took is how
// long it took, or 0 for a request no replica took.
func (r *recent) done(model string, status int, took time.Duration, now time.Time) {
	if r == nil || model == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.models[model]
	if w == nil {
		w = &window{}
		r.models[model] = w
	}
	at := now.Unix()
	s := &w.secs[at%int64(len(w.secs))]
	if s.at != at {
		*s = second{at: at}
	}
	s.requests++
	if failedStatus(status) {
		s.failed++
	}
	if took > 0 && answeredStatus(status) {
		s.answered++
		s.latency[latencySlot(took)]++
	}
}

func (r *recent) read(now time.Time) map[string]Traffic {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]Traffic{}
	since := now.Add(-TrafficWindow).Unix()
	var lat [latencySlots]int
	for model, w := range r.models {
		var t Traffic
		clear(lat[:])
		for i := range w.secs {
			s := &w.secs[i]
			if s.at <= since || s.at > now.Unix() {
				continue
			}
			t.Requests += int(s.requests)
			t.Failed += int(s.failed)
			t.Answered += int(s.answered)
			for j, n := range s.latency {
				lat[j] += int(n)
			}
		}
		if t.Requests == 0 {
			// A model idle for a minute is forgotten, so the map keeps
			// only models in use (a removed model's name too goes).
			delete(r.models, model)
			continue
		}
		t.P50 = median(lat[:], t.Answered)
		out[model] = t
	}
	return out
}

// failedStatus is whether a request that ended with status failed: the
// gateway or its engine failed it (5xx, 502 for no answer), or there was no
// room for it (429). The same rule for Traffic and Measure, and for the
// replicas a failure has avoided for a while (proxy.go).
//
// What the client did is not the model's failure: a bad request or token,
// an unknown route (4xx), a client that went away (499), and llama.cpp's
// 501, its answer to a route it was not started for (reranking of a model
// not served for it), which nothing but another request mends.
func failedStatus(status int) bool {
	return (status >= 500 && status != http.StatusNotImplemented) || status == http.StatusTooManyRequests
}

// answeredStatus is whether a request a replica took, ending with status,
// was answered: a client gone before the end, or a replica that failed,
// says nothing of how long an answer takes.
func answeredStatus(status int) bool { return status < 500 && status != statusClientGone }

// latencySlot is the slot of a latency: slotsPerDouble slots per doubling
// from a millisecond.
func latencySlot(d time.Duration) int {
	ms := float64(d) / float64(time.Millisecond)
	if ms <= 1 {
		return 0
	}
	return min(int(math.Log2(ms)*slotsPerDouble)+1, latencySlots-1)
}

// slotBounds are the latencies slot i holds, from lo to hi.
func slotBounds(i int) (lo, hi float64) {
	if i == 0 {
		return 0, 1
	}
	return math.Exp2(float64(i-1) / slotsPerDouble), math.Exp2(float64(i) / slotsPerDouble)
}

// median is the middle of n latencies counted in slots.
func median(slots []int, n int) time.Duration { return slotQuantile(slots, n, .5) }

// slotQuantile is the q-quantile of n latencies counted in slots, placed
// within its slot as if the slot's latencies were spread evenly (as
// Prometheus's histogram_quantile does).
func slotQuantile(slots []int, n int, q float64) time.Duration {
	if n == 0 {
		return 0
	}
	rank := float64(n) * q
	seen := 0
	for i, c := range slots {
		if c == 0 {
			continue
		}
		if float64(seen+c) >= rank {
			lo, hi := slotBounds(i)
			ms := lo + (hi-lo)*(rank-float64(seen))/float64(c)
			return time.Duration(ms * float64(time.Millisecond))
		}
		seen += c
	}
	lo, _ := slotBounds(len(slots) - 1)
	return time.Duration(lo * float64(time.Millisecond))
}

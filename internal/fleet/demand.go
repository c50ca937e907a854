package fleet

import (
	"fmt"
	"sync"
	"time"

	"modelserve/catalog"
	"modelserve/internal/words"
)

// On demand: a model whose catalog entry keeps no replica (Scaling.Min 0)
// is started when a request asks for it, and stopped when nobody has asked
// for a while; a model whose queue runs deep gets more replicas, up to
// Scaling.Max, and gives them back when the traffic falls. The gateway,
// which sees the requests, says what it needs through Use; the reconciling
// loop turns that into how many replicas each model wants.

// DefaultIdleAfter is how long replicas started on demand wait for the
// next request when the catalog entry does not say (Scaling.IdleAfter):
// long enough that someone reading an answer and asking again finds the
// model loaded, short enough that a model tried once gives its memory back
// within the hour. The catalog owns it, as it owns the bounds an operator
// may set.
const DefaultIdleAfter = catalog.DefaultIdleAfter

// demand is what has been asked of one model lately.
type demand struct {
	// asks are the requests being served now, by when each was asked: a
	// model is never idle in the middle of an answer, however long it
	// streams, and its oldest is its place among the models waiting for
	// room (order.go).
	asks Asks
	// lastUse is when the last request began or ended.
	lastUse time.Time
	// want is the replicas wanted, before the catalog's bounds: the most
	// asked for in this window or the one before it.
	want int
	// peak is the most asked for since window began. At the end of each
	// window (IdleAfter long) want falls to it, so replicas started for a
	// burst are given back one window after the burst.
	peak   int
	window time.Time
	// due has the fleet look again when the model may next fall idle:
	// without it an idle time shorter than the fleet's Interval was
	// waited out to the next tick, and a model set to stop after 1s of
	// quiet ran on for up to 6.
	due *time.Timer
}

// Use says that a request for model, asked at askedAt, is being served and
// that replicas replicas (at least one) are needed for what is asked of it
// now. askedAt is the request's arrival, as the gateway saw it: its place
// among the models waiting for room (order.go), and the time its hold on
// a replica is asked with (Hold), so both go by one clock. The fleet
// keeps the model at max(Scaling.Min, min(replicas, Scaling.Max)) replicas
// (a Max of 0 means 1) while requests come, and lets those above Min go
// once none has come for the model's Scaling.IdleAfter (DefaultIdleAfter
// when unset). A model asked for more than it runs is looked at at once.
//
// Call release when the request is over; until then the model is in use
// and none of its replicas is idle. Concurrent first requests each call
// Use, and start one replica between them: the wanted count is a maximum,
// not a sum.
func (f *Fleet) Use(model string, replicas int, askedAt time.Time) (release func()) {
	replicas = max(replicas, 1)
	now := time.Now()
	f.mu.Lock()
	if f.demands == nil {
		f.demands = map[string]*demand{}
	}
	d := f.demands[model]
	if d == nil {
		d = &demand{window: now}
		f.demands[model] = d
	}
	d.asks.Add(askedAt)
	d.lastUse = now
	d.peak = max(d.peak, replicas)
	more := replicas > d.want
	d.want = max(d.want, replicas)
	f.mu.Unlock()
	if more {
		f.look()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			// The demand may have been dropped meanwhile (a new Run, the
			// model removed): this release is then about nothing.
			look := false
			if f.demands[model] == d {
				was := d.asks.Oldest()
				d.asks.Done(askedAt)
				d.lastUse = time.Now()
				// Its replicas may be idle now, or its requests all
				// behind another model's that waits for their room.
				look = f.waitingLocked() && (d.asks.Len() == 0 || f.passedLocked(was, d.asks.Oldest()))
			}
			f.mu.Unlock()
			if look {
				f.look()
			}
		})
	}
}

// Serving are model's ready replicas, without their logs: what a router
// reads on every request, so it copies no more than it needs.
func (f *Fleet) Serving(model string) []Replica {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Replica
	for _, r := range f.replicas {
		if r.model == model && r.state == Ready && !r.stopping && r.endpoint != "" {
			v := Replica{ID: r.id, Model: r.model, Node: r.node.Name(), Endpoint: r.endpoint, State: r.state, Load: r.load}
			out = append(out, v)
		}
	}
	return out
}

// askedAtLocked is when model's oldest unanswered request was asked: its
// place among the models waiting for room (order.go), the zero time for
// a model with none.
func (f *Fleet) askedAtLocked(model string) time.Time {
	if d := f.demands[model]; d != nil {
		return d.asks.Oldest()
	}
	return time.Time{}
}

// passedLocked is whether a model's oldest unanswered request, asked at
// was and now at is, has passed the oldest of a model waiting for room:
// its busy replica is behind that one now (Behind), and may be given back.
func (f *Fleet) passedLocked(was, is time.Time) bool {
	for name, st := range f.models {
		if !st.waitsForIdle {
			continue
		}
		w := f.askedAtLocked(name)
		if !Behind(was, w) && Behind(is, w) {
			return true
		}
	}
	return false
}

// idleAfter is how long m's replicas above Min wait for a request.
func idleAfter(m catalog.Model) time.Duration {
	if m.Scaling.IdleAfter > 0 {
		return m.Scaling.IdleAfter
	}
	return DefaultIdleAfter
}

// wantLocked is how many replicas m is to have now: its Min, raised by what
// was asked of it lately (Use) up to its Max. A demand idle for the model's
// IdleAfter is forgotten.
func (f *Fleet) wantLocked(m catalog.Model, now time.Time) int {
	d := f.demands[m.Name]
	if d == nil {
		return m.Scaling.Min
	}
	idle := idleAfter(m)
	if d.asks.Len() == 0 && now.Sub(d.lastUse) >= idle {
		f.dropDemandLocked(m.Name)
		return m.Scaling.Min
	}
	// In use, it is idle an IdleAfter after its last request ends at the
	// soonest; a look then finds whether it did.
	next := d.lastUse.Add(idle).Sub(now)
	if d.asks.Len() > 0 {
		next = idle
	}
	if d.due == nil {
		d.due = time.AfterFunc(next, f.look)
	} else {
		d.due.Reset(next)
	}
	if now.Sub(d.window) >= idle {
		d.want, d.peak, d.window = max(d.peak, 1), 0, now
	}
	return max(m.Scaling.Min, min(d.want, m.Scaling.UpTo()))
}

// forgetDemandsLocked drops what was asked of models no longer in the
// catalog: a model added again under the name starts from nothing.
func (f *Fleet) forgetDemandsLocked(inCatalog map[string]catalog.Model) {
	for name := range f.demands {
		if _, ok := inCatalog[name]; !ok {
			f.dropDemandLocked(name)
		}
	}
}

// dropDemandLocked forgets what was asked of model, and the look it had
// due.
func (f *Fleet) dropDemandLocked(model string) {
	if d := f.demands[model]; d != nil && d.due != nil {
		d.due.Stop()
	}
	delete(f.demands, model)
}

// surplusReason says why a replica of m above the want is stopped.
func surplusReason(m catalog.Model, want int) string {
	switch {
	case want == 0:
		return fmt.Sprintf("no request for %s in %s: stopped until it is asked for again", m.Name, idleAfter(m))
	case want > m.Scaling.Min:
		return fmt.Sprintf("%s needs %d %s for its requests now", m.Name, want, words.Plural(want, "replica", "replicas"))
	}
	return fmt.Sprintf("%s is to keep %d %s", m.Name, want, words.Plural(want, "replica", "replicas"))
}

package fleet

import (
	"cmp"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"

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

// Demands are what has been asked of each model lately: the one owner of
// on-demand scaling, on either backend (the two fleets had each written
// it, and drifted: only one gave a burst's replicas back, and looked
// again when a model could fall idle). It
// answers how many replicas a model wants now (Want) and has its fleet
// look again when that may change; its methods are safe for concurrent
// use, and call nothing of their fleet's while they hold their lock.
type Demands struct {
	clock clock.WithDelayedExecution
	// look has the fleet look at model again.
	look func(model string)

	mu sync.Mutex
	of map[string]*demand
}

// NewDemands are demands timed by c, which call look when a model may
// want fewer replicas than when it was last looked at.
func NewDemands(c clock.WithDelayedExecution, look func(model string)) *Demands {
	return &Demands{clock: c, look: look, of: map[string]*demand{}}
}

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
	due clock.Timer
}

// Demand is what has been asked of one model, as read at one moment.
type Demand struct {
	// Asked counts the requests being served now; Oldest is when the
	// oldest of them was asked (the zero time for none).
	Asked  int
	Oldest time.Time
	// LastUse is when the last request began or ended.
	LastUse time.Time
}

// Ended is what the end of a request changed of its model's demand: its
// oldest unanswered request before (Was) and after (Is, the zero time
// when none is left).
type Ended struct{ Was, Is time.Time }

// Use records that a request for model, asked at askedAt, is being served
// and needs replicas replicas (at least one): the wanted count is a
// maximum, not a sum, so concurrent first requests start one replica
// between them. more says the model wants more than before: look at it
// now. Call end when the request is over; ok is false when that was said
// already, or the model's demand was forgotten meanwhile (a new Run, the
// model removed), and the end is then about nothing.
func (ds *Demands) Use(model string, replicas int, askedAt time.Time) (end func() (e Ended, ok bool), more bool) {
	replicas = max(replicas, 1)
	now := ds.clock.Now()
	ds.mu.Lock()
	d := ds.of[model]
	if d == nil {
		d = &demand{window: now}
		ds.of[model] = d
	}
	d.asks.Add(askedAt)
	d.lastUse = now
	d.peak = max(d.peak, replicas)
	more = replicas > d.want
	d.want = max(d.want, replicas)
	ds.mu.Unlock()
	done := false
	return func() (Ended, bool) {
		ds.mu.Lock()
		defer ds.mu.Unlock()
		if done || ds.of[model] != d {
			done = true
			return Ended{}, false
		}
		done = true
		e := Ended{Was: d.asks.Oldest()}
		d.asks.Done(askedAt)
		d.lastUse = ds.clock.Now()
		e.Is = d.asks.Oldest()
		return e, true
	}, more
}

// Of is what has been asked of model; false when nothing has lately.
func (ds *Demands) Of(model string) (Demand, bool) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d := ds.of[model]
	if d == nil {
		return Demand{}, false
	}
	return Demand{Asked: d.asks.Len(), Oldest: d.asks.Oldest(), LastUse: d.lastUse}, true
}

// Oldest is when model's oldest unanswered request was asked: its place
// among the models waiting for room (order.go), the zero time for none.
func (ds *Demands) Oldest(model string) time.Time {
	d, _ := ds.Of(model)
	return d.Oldest
}

// Want is how many replicas m is to have at now: its Min, raised by what
// was asked of it lately (Use) up to its Max (a Max of 0 means 1). A
// demand idle for the model's IdleAfter is forgotten; the replicas of a
// burst are given back one IdleAfter after it. While m wants more than
// its Min, its fleet is told to look again when m may next fall idle.
func (ds *Demands) Want(m catalog.Model, now time.Time) int {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d := ds.of[m.Name]
	if d == nil {
		return m.Scaling.Min
	}
	idle := idleAfter(m)
	if d.asks.Len() == 0 && now.Sub(d.lastUse) >= idle {
		ds.forgetLocked(m.Name)
		return m.Scaling.Min
	}
	// In use, it is idle an IdleAfter after its last request ends at the
	// soonest; a look then finds whether it did.
	next := d.lastUse.Add(idle).Sub(now)
	if d.asks.Len() > 0 {
		next = idle
	}
	// A new timer each time, not one Reset: a fired timer of a fake
	// clock keeps its tick, and Reset would block the clock on it.
	if d.due != nil {
		d.due.Stop()
	}
	name := m.Name
	d.due = ds.clock.AfterFunc(next, func() { ds.look(name) })
	if now.Sub(d.window) >= idle {
		d.want, d.peak, d.window = max(d.peak, 1), 0, now
	}
	return max(m.Scaling.Min, min(d.want, m.Scaling.UpTo()))
}

// Abandoned forgets what was asked of m when every request that asked
// for more than its Min (want) went away, served or given up by its
// client, before any replica of it was placed (placed counts those on a
// node, starting or serving): nobody is stopped, nothing started, on
// their behalf, as if it had not been asked. It says whether it did; m
// then wants its Min. The fleet asks it each time it looks at m: without
// it, the Kubernetes fleet of before kept the Deployment of a model whose
// client had given up scaled up, its pod waiting for the scheduler to
// take the room of the model it had waited on.
func (ds *Demands) Abandoned(m catalog.Model, want, placed int) bool {
	if placed > 0 || want <= m.Scaling.Min {
		return false
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d := ds.of[m.Name]
	if d == nil || d.asks.Len() > 0 {
		return false
	}
	ds.forgetLocked(m.Name)
	return true
}

// Forget drops what was asked of model, and the look it had due: asked
// again, it starts from nothing.
func (ds *Demands) Forget(model string) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	ds.forgetLocked(model)
}

// Keep forgets what was asked of every model keep says no to (a model no
// longer in the catalog; every model, when the fleet stops).
func (ds *Demands) Keep(keep func(model string) bool) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	for name := range ds.of {
		if !keep(name) {
			ds.forgetLocked(name)
		}
	}
}

func (ds *Demands) forgetLocked(model string) {
	if d := ds.of[model]; d != nil && d.due != nil {
		d.due.Stop()
	}
	delete(ds.of, model)
}

// Use says that a request for model, asked at askedAt, is being served and
// that replicas replicas (at least one) are needed for what is asked of it
// now. askedAt is the request's arrival, as the gateway saw it: its place
// among the models waiting for room (order.go), and the time its hold on
// a replica is asked with (Hold), so both go by one clock. The fleet
// keeps the model at max(Scaling.Min, min(replicas, Scaling.Max)) replicas
// (a Max of 0 means 1) while requests come, and lets those above Min go
// once none has come for the model's Scaling.IdleAfter (DefaultIdleAfter
// when unset) (Demands). A model asked for more than it runs is looked
// at at once.
//
// Call release when the request is over; until then the model is in use
// and none of its replicas is idle.
func (f *Fleet) Use(model string, replicas int, askedAt time.Time) (release func()) {
	end, more := f.demands.Use(model, replicas, askedAt)
	if more {
		f.look()
	}
	return func() {
		e, ok := end()
		if !ok {
			return
		}
		f.mu.Lock()
		// Its replicas may be idle now, or its requests all behind
		// another model's that waits for their room.
		look := f.waitingLocked() && (e.Is.IsZero() || f.passedLocked(e.Was, e.Is))
		f.mu.Unlock()
		if look {
			f.look()
		}
	}
}

// Serving are model's ready replicas, without their logs: what a router
// reads on every request, so it copies no more than it needs.
func (f *Fleet) Serving(model string) []Replica {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Replica
	for _, r := range f.replicas {
		if r.model != model || r.stopping {
			continue
		}
		if o := f.seenLocked(r); o.State == Ready && o.Endpoint != "" {
			v := Replica{ID: r.id, Model: r.model, Node: cmp.Or(o.Node, r.node), Endpoint: o.Endpoint, State: o.State, Load: o.Load}
			out = append(out, v)
		}
	}
	return out
}

// askedAtLocked is when model's oldest unanswered request was asked: its
// place among the models waiting for room (order.go), the zero time for
// a model with none.
func (f *Fleet) askedAtLocked(model string) time.Time {
	return f.demands.Oldest(model)
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

package fleet

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"modelserve/catalog"
	"modelserve/internal/words"
)

// Swapping: there are more models than memory. A model that wants a
// replica where no node has room takes the room of idle replicas of models
// served on demand, as an operator with one machine and five models
// expects: the least recently used first, as few as will do, opportunistic
// before standard. This is the one rule of which replica may be stopped to
// make room (makeRoomLocked asks it); never a critical model's, never one
// its model's Scaling.Min keeps, never one answering or about to answer a
// request. Requests waiting for room are served in the order they came:
// models are placed in the order they were first asked for, and a busy
// replica whose model was asked for again after another model began to
// wait for its room is given back once the answers it has end (it drains,
// drain.go), so a model asked for again and again does not starve a
// waiting one. A critical model may also take the room of opportunistic
// replicas that are busy: they drain first.

// give is what a replica is to a model that needs its room.
type give int

const (
	keep      give = iota // never given back for it
	idleGive              // idle on demand: given back now
	busyGive              // on demand, but answering or about to: given back once idle
	drainGive             // answering, and asked for again after m began to wait: given back once its answers end
)

// giveLocked is what r is to m, which needs its room.
func (f *Fleet) giveLocked(r *replica, m catalog.Model) give {
	if r.stopping || r.released || r.model == m.Name {
		return keep
	}
	st := f.models[r.model]
	if st == nil {
		return keep
	}
	if m.ClassOrDefault() == catalog.ClassCritical && st.class == catalog.ClassOpportunistic {
		return idleGive // as before: a critical model's room comes first
	}
	if st.class == catalog.ClassCritical || st.min > 0 {
		return keep
	}
	d := f.demands[r.model]
	if r.state != Ready || r.holds > 0 || d != nil && d.inUse > 0 {
		if w := f.demands[m.Name]; r.state == Ready && r.holds > 0 && d != nil && w != nil && d.lastAsk.After(w.since) {
			return drainGive
		}
		return busyGive
	}
	return idleGive
}

// lastUsedLocked is when r's model was last asked for: the zero time when
// it has not been since its demand was forgotten.
func (f *Fleet) lastUsedLocked(r *replica) time.Time {
	if d := f.demands[r.model]; d != nil {
		return d.lastUse
	}
	return time.Time{}
}

// victimOrder sorts the replicas to give back for m: idle before busy,
// opportunistic before standard, then the least recently used first.
func (f *Fleet) victimOrderLocked(rs []*replica, m catalog.Model) {
	busy := func(r *replica) int { return boolRank(f.giveLocked(r, m) != idleGive || r.holds > 0) }
	slices.SortStableFunc(rs, func(x, y *replica) int {
		return cmp.Or(cmp.Compare(busy(x), busy(y)), cmp.Compare(classOrder(f.models[x.model].class), classOrder(f.models[y.model].class)),
			f.lastUsedLocked(x).Compare(f.lastUsedLocked(y)), compareIDs(x.id, y.id))
	})
}

func classOrder(class string) int {
	if class == catalog.ClassOpportunistic {
		return 0
	}
	return 1
}

// giveBackLocked retires r for m, saying why, counts it, and forgets what
// was asked of r's model: it wants no replica again until it is asked for
// again, or two models would take the room from each other for ever.
func (f *Fleet) giveBackLocked(r *replica, m catalog.Model, now time.Time) {
	reason, why := "swap", "given back for "+m.Name+", idle"
	if m.ClassOrDefault() == catalog.ClassCritical && f.models[r.model].class == catalog.ClassOpportunistic {
		reason, why = "critical", fmt.Sprintf("stopped to make room for %s, a critical model", m.Name)
	} else if last := f.lastUsedLocked(r); !last.IsZero() {
		why += " for " + words.Span(now.Sub(last))
	}
	if d := f.demands[r.model]; r.holds > 0 || d != nil && d.inUse > 0 {
		// Given back busy: its model's requests still to come are behind
		// m's, so its wait begins now.
		if reason == "swap" {
			why = "given back for " + m.Name + " once the answers it has end"
		}
		if d != nil {
			d.since = now
		}
	} else {
		f.dropDemandLocked(r.model)
	}
	f.stopLocked(r, why)
	r.evictedFor = m.Name
	if st := f.models[r.model]; st != nil {
		st.lastStop = r.id + ": " + why
	}
	f.countEvictionLocked(r.model, reason)
}

// Eviction counts the replicas of a model given back to make room, by why:
// "swap" (idle, for another model) or "critical" (for a critical model).
type Eviction struct {
	Model, Reason string
	Count         int
}

func (f *Fleet) countEvictionLocked(model, reason string) {
	if f.evictions == nil {
		f.evictions = map[[2]string]int{}
	}
	f.evictions[[2]string{model, reason}]++
}

// Evictions are the replicas given back to make room since the fleet was
// made, by model and why, for /metrics.
func (f *Fleet) Evictions() []Eviction {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Eviction, 0, len(f.evictions))
	for k, n := range f.evictions {
		out = append(out, Eviction{Model: k[0], Reason: k[1], Count: n})
	}
	slices.SortFunc(out, func(a, b Eviction) int { return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.Reason, b.Reason)) })
	return out
}

// waitingLocked is whether a model waits for a busy replica to fall idle
// and give back its room: a request ending is then a reason to look.
func (f *Fleet) waitingLocked() bool {
	for _, st := range f.models {
		if st.waitsForIdle {
			return true
		}
	}
	return false
}

// abandonedLocked is whether every request that asked for model has gone
// (served, or its client gave up).
func (f *Fleet) abandonedLocked(model string) bool {
	d := f.demands[model]
	return d != nil && d.inUse == 0
}

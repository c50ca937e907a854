package kubefleet

import (
	"fmt"
	"sync"
	"time"

	"modelserve/internal/fleet"
	"modelserve/internal/words"
)

// No pod is deleted by modelserve's own decision with an answer in flight,
// as the local fleet retires its replicas (internal/fleet/drain.go): a pod
// to go drains first. It leaves Serving at once, the requests the gateway
// holds it for go on to their end, and only then (or once DrainTimeout has
// passed) does it go. A pod an operator stops or restarts is deleted, and
// its Deployment starts another; a pod its Deployment is to lose (a lower
// max, an idle model, one given back for another) is deleted as its
// Deployment is scaled down (scaledown.go). Deleting at once cut the answer
// it was streaming.

// drainTimeout bounds a drain unless Options.DrainTimeout is set, as the
// local fleet's default does.
const drainTimeout = 10 * time.Minute

// draining is a pod being drained: why, and the timer that ends the drain
// anyway.
type draining struct {
	why   string
	model string
	timer *time.Timer
	// ending is set once the deletion of a pod an operator stopped has
	// begun.
	ending bool
	// deployment is set for a pod its Deployment is to lose: the
	// scale-down's pass deletes it once drained, and lowers the
	// Deployment's replicas in the same pass. deleted is set once it has
	// been deleted, until the cache sees it go.
	deployment       string
	drained, deleted bool
}

// Hold says a request asked at askedAt (as it was told to Use) is being
// sent to pod id; false when the pod is draining, so no request reaches a
// pod about to be deleted, or when a model asked for before the request
// waits for the pod's room (fleet.Owed): the request waits its turn,
// behind that model's, as on the local fleet.
func (f *Fleet) Hold(id string, askedAt time.Time) (release func(), ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.drains[id] != nil || f.owed.Refuses(id, askedAt) {
		return nil, false
	}
	f.holds[id]++
	f.usedAt[id] = time.Now()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			f.holds[id]--
			drained := f.holds[id] == 0 && f.drains[id] != nil
			if f.holds[id] == 0 {
				delete(f.holds, id)
			}
			f.mu.Unlock()
			if drained {
				f.finishDrain(id, "drained: its requests had ended")
			}
		})
	}, true
}

// drain deletes pod id, stopped by an operator, once the requests it holds
// have ended: at once when it holds none. Its Deployment starts another.
func (f *Fleet) drain(id, model, why string) error {
	f.mu.Lock()
	if f.drains[id] != nil {
		f.mu.Unlock()
		return nil
	}
	n := f.holds[id]
	if n == 0 {
		f.mu.Unlock()
		return f.deletePod(id)
	}
	f.drains[id] = f.newDrainLocked(id, model, why)
	f.mu.Unlock()
	f.log.Info("draining a pod", "replica", id, "why", why, "in_flight", n)
	return nil
}

// newDrainLocked is pod id's drain, bounded by the drain timeout.
func (f *Fleet) newDrainLocked(id, model, why string) *draining {
	d := &draining{why: why, model: model}
	bound := f.drainTimeout()
	d.timer = time.AfterFunc(bound, func() {
		f.log.Warn("a draining pod is deleted with requests in flight", "replica", id, "drain_timeout", bound)
		f.finishDrain(id, fmt.Sprintf("deleted with requests still in flight: %s of draining, the longest an answer may take, passed", bound))
	})
	return d
}

// stopTimer stops d's bound, when it has one: a pod that held nothing
// when it was chosen to go has none.
func stopTimer(d *draining) {
	if d.timer != nil {
		d.timer.Stop()
	}
}

func (f *Fleet) drainTimeout() time.Duration {
	if f.opts.DrainTimeout > 0 {
		return f.opts.DrainTimeout
	}
	return drainTimeout
}

// finishDrain ends pod id's drain: a pod an operator stopped is deleted
// now; one its Deployment is to lose, by the model's next pass.
func (f *Fleet) finishDrain(id, how string) {
	f.mu.Lock()
	d := f.drains[id]
	if d == nil || d.ending || d.drained {
		// The last release and the bound's timer may both end a drain:
		// the first ends it.
		f.mu.Unlock()
		return
	}
	stopTimer(d)
	d.why += "; " + how
	if d.deployment != "" {
		d.drained = true
		f.mu.Unlock()
		f.queue.Add(d.model)
		return
	}
	d.ending = true
	f.mu.Unlock()
	if err := f.deletePod(id); err != nil {
		f.log.Warn("deleting a drained pod", "replica", id, "err", err)
	}
	f.mu.Lock()
	if d.deployment == "" {
		// Else a scale-down took it over while it was deleted
		// (goLocked), and keeps it until the cache sees it go.
		delete(f.drains, id)
	}
	f.mu.Unlock()
}

// forgetDrainsLocked drops the drains which says: of pods gone, of a
// model removed, or of a Deployment deleted.
func (f *Fleet) forgetDrainsLocked(which func(id string, d *draining) bool) {
	for id, d := range f.drains {
		if which(id, d) {
			stopTimer(d)
			delete(f.drains, id)
		}
	}
}

// drainState is r as its drain says, when it drains.
func (f *Fleet) drainState(r fleet.Replica) fleet.Replica {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d := f.drains[r.ID]; d != nil && r.State != fleet.Stopping {
		r.State = fleet.Draining
		r.Detail = d.why
		if !d.drained {
			r.Detail += "; draining: waiting for " + words.Count(f.holds[r.ID], "request", "requests") + " in flight to end"
		}
	}
	return r
}

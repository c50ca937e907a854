package kubefleet

import (
	"fmt"
	"sync"
	"time"

	"modelserve/internal/fleet"
	"modelserve/internal/words"
)

// A pod stopped by an operator drains first, as the local fleet's replicas
// do (internal/fleet/drain.go): it leaves Serving at once, the requests
// the gateway holds it for go on to their end, and only then (or once
// DrainTimeout has passed) is it deleted. Deleting it at once cut the
// answer it was streaming.

// drainTimeout bounds a drain unless Options.DrainTimeout is set, as the
// local fleet's default does.
const drainTimeout = 10 * time.Minute

// draining is a pod being drained: why, and the timer that deletes it
// anyway.
type draining struct {
	why   string
	timer *time.Timer
	// ending is set once the pod's deletion has begun.
	ending bool
}

// Hold says a request is being sent to pod id; false when the pod is
// draining, so no request reaches a pod about to be deleted.
func (f *Fleet) Hold(id string) (release func(), ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.drains[id] != nil {
		return nil, false
	}
	f.holds[id]++
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

// drain deletes pod id once the requests it holds have ended: at once when
// it holds none.
func (f *Fleet) drain(id, why string) error {
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
	d := &draining{why: why}
	f.drains[id] = d
	bound := f.drainTimeout()
	d.timer = time.AfterFunc(bound, func() {
		f.log.Warn("a draining pod is deleted with requests in flight", "replica", id, "drain_timeout", bound)
		f.finishDrain(id, fmt.Sprintf("deleted with requests still in flight: %s of draining, the longest an answer may take, passed", bound))
	})
	f.mu.Unlock()
	f.log.Info("draining a pod", "replica", id, "why", why, "in_flight", n)
	return nil
}

func (f *Fleet) drainTimeout() time.Duration {
	if f.opts.DrainTimeout > 0 {
		return f.opts.DrainTimeout
	}
	return drainTimeout
}

// finishDrain deletes a drained pod.
func (f *Fleet) finishDrain(id, how string) {
	f.mu.Lock()
	d := f.drains[id]
	if d == nil || d.ending {
		// The last release and the bound's timer may both end a drain:
		// the first deletes the pod.
		f.mu.Unlock()
		return
	}
	d.ending = true
	d.timer.Stop()
	d.why += "; " + how
	f.mu.Unlock()
	if err := f.deletePod(id); err != nil {
		f.log.Warn("deleting a drained pod", "replica", id, "err", err)
	}
	f.mu.Lock()
	delete(f.drains, id)
	f.mu.Unlock()
}

// drainState is r as its drain says, when it drains.
func (f *Fleet) drainState(r fleet.Replica) fleet.Replica {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d := f.drains[r.ID]; d != nil && r.State != fleet.Stopping {
		r.State = fleet.Draining
		r.Detail = d.why + "; draining: waiting for " + words.Count(f.holds[r.ID], "request", "requests") + " in flight to end"
	}
	return r
}

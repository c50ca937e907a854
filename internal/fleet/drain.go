package fleet

import (
	"fmt"
	"sync"
	"time"

	"modelserve/internal/words"
)

// A replica is retired by draining it, as a proxy retires a backend: it
// leaves the replicas the gateway may send to at once (Draining), the
// requests it has go on to their end, and only then is its engine
// stopped. Before, a scale-down, an idle stop, a promotion or an
// operator's Stop killed the engine in the middle of the answers it was
// writing, and the requests routed to it a moment before met a refused
// connection.
//
// The requests are counted here, where the decision to stop is made: the
// gateway holds a replica for each request it sends (Hold) and lets go
// when the answer has ended. A hold asked of a replica already draining is
// refused, so no request reaches an engine the fleet may have stopped.

// Hold says that a request asked at askedAt (as it was told to Use) is
// being sent to replica id: the replica is not stopped until release is
// called (or the drain timeout passes). ok is false when the replica is
// not one to send to: it is draining, stopping, not ready, or gone; or
// when it is not the request's yet: a model asked for before it waits for
// the replica's room (Owed), and the request waits its turn, behind that
// model's.
func (f *Fleet) Hold(id string, askedAt time.Time) (release func(), ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, found := f.replicas[id]
	if !found || r.stopping || r.released || r.state != Ready || f.owed.Refuses(id, askedAt) {
		return nil, false
	}
	r.holds++
	r.usedAt = time.Now()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			r.holds--
			look := r.holds == 0 && !r.stopping && f.waitingLocked()
			if r.holds == 0 && r.stopping {
				f.drainedLocked(r)
			}
			f.mu.Unlock()
			if look {
				f.look() // another model may wait for its room
			}
		})
	}, true
}

// retireLocked stops r once the requests it holds have ended: at once when
// it holds none, else when the last ends or Options.DrainTimeout has
// passed.
func (f *Fleet) retireLocked(r *replica, why string) {
	if r.released || r.stopping {
		return
	}
	r.stopping = true
	// Said once, in modelserve's log: the replica leaves the fleet's list
	// when its engine has stopped, and this line is what is left of why.
	f.log.Info("retiring a replica", "replica", r.id, "model", r.model, "why", why, "in_flight", r.holds)
	if r.holds == 0 {
		r.state, r.detail = Stopping, why
		r.cancel()
		return
	}
	r.state, r.detail = Draining, why+fmt.Sprintf("; draining: waiting for %s in flight to end",
		words.Count(r.holds, "request", "requests"))
	r.log.Note("modelserve: " + r.detail)
	r.why = why
	r.drain = time.AfterFunc(f.opts.DrainTimeout, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r.state != Draining {
			return
		}
		r.state, r.detail = Stopping, fmt.Sprintf("%s; stopped with %s still in flight: %s of draining, the longest an answer may take, passed",
			r.why, words.Count(r.holds, "request", "requests"), f.opts.DrainTimeout)
		r.log.Note("modelserve: " + r.detail)
		f.log.Warn("a draining replica is stopped with requests in flight", "replica", r.id, "requests", r.holds, "drain_timeout", f.opts.DrainTimeout)
		r.cancel()
	})
}

// drainedLocked stops r, whose last request has ended.
func (f *Fleet) drainedLocked(r *replica) {
	if r.state != Draining {
		return
	}
	if r.drain != nil {
		r.drain.Stop()
	}
	r.state, r.detail = Stopping, r.why+"; drained: its requests had ended"
	r.cancel()
}

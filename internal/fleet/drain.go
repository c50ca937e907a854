package fleet

import "time"

// A replica is retired by draining it, as a proxy retires a backend: it
// leaves the replicas the gateway may send to at once (Draining), the
// requests it has go on to their end, and only then is its engine
// stopped. Before, a scale-down, an idle stop, a promotion or an
// operator's Stop killed the engine in the middle of the answers it was
// writing, and the requests routed to it a moment before met a refused
// connection.
//
// The requests are counted where the decision to stop is made (Drains,
// which the Kubernetes fleet counts its pods' by too): the gateway holds
// a replica for each request it sends (Hold) and lets go when the answer
// has ended. A hold asked of a replica already draining is refused, so no
// request reaches an engine the fleet may have stopped.

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
	if !found || r.stopping || r.released || f.seenLocked(r).State != Ready || f.owed.Refuses(id, askedAt) {
		return nil, false
	}
	end, ok := f.drains.Hold(id)
	if !ok {
		return nil, false
	}
	return func() {
		if !end() {
			return
		}
		f.mu.Lock()
		look := !r.stopping && f.waitingLocked()
		f.mu.Unlock()
		if look {
			f.look() // another model may wait for its room
		}
	}, true
}

// retireLocked stops r once the requests it holds have ended: at once when
// it holds none, else when the last ends or Options.DrainTimeout has
// passed (Drains).
func (f *Fleet) retireLocked(r *replica, why string) {
	if r.released || r.stopping {
		return
	}
	r.stopping = true
	n, _ := f.drains.Drain(r.id, why)
	// Said once, in modelserve's log: the replica leaves the fleet's list
	// when its engine has stopped, and this line is what is left of why.
	f.log.Info("retiring a replica", "replica", r.id, "model", r.model, "why", why, "in_flight", n)
	r.state, r.detail, _ = f.drains.State(r.id)
	if n == 0 {
		f.backend.Stop(r.id, why)
		return
	}
	f.backend.Note(r.id, "modelserve: "+r.detail)
}

// drained stops replica id, whose drain has ended: its last request
// ended, or the drain timeout passed with some in flight.
func (f *Fleet) drained(id string, late int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.replicas[id]
	if r == nil || r.state != Draining {
		return
	}
	r.state, r.detail, _ = f.drains.State(id)
	if late > 0 {
		f.backend.Note(id, "modelserve: "+r.detail)
		f.log.Warn("a draining replica is stopped with requests in flight", "replica", r.id, "requests", late, "drain_timeout", f.opts.DrainTimeout)
	}
	f.backend.Stop(id, r.detail)
}

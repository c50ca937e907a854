package kubefleet

import (
	"time"

	"modelserve/internal/fleet"
)

// No pod is deleted by modelserve's own decision with an answer in flight,
// as the local fleet retires its replicas (internal/fleet/drain.go): a pod
// to go drains first. It leaves Serving at once, the requests the gateway
// holds it for go on to their end, and only then (or once DrainTimeout has
// passed) does it go. A pod an operator stops or restarts is deleted, and
// its Deployment starts another; a pod its Deployment is to lose (a lower
// max, an idle model, one given back for another, a profile promoted over
// its own, its model or profile removed) is deleted as its Deployment is
// scaled down (scaledown.go); a pod of a catalog entry since changed is
// replaced as its Deployment takes the new entry (rolled). Deleting at
// once cut the answer it was streaming. The drains themselves, the
// requests each pod holds and what its state says of them are the local
// fleet's too (fleet.Drains).

// leaving is a pod to go, as this fleet deletes it; its drain (the
// requests it holds, its bound, why it goes) is the fleet's Drains'.
type leaving struct {
	model string
	// ending is set once the deletion of a pod an operator stopped has
	// begun.
	ending bool
	// deployment is set for a pod its Deployment is to lose: the
	// scale-down's pass deletes it once drained, and lowers the
	// Deployment's replicas in the same pass. deleted is set once it has
	// been deleted, until the cache sees it go.
	deployment string
	deleted    bool
}

// Hold says a request asked at askedAt (as it was told to Use) is being
// sent to pod id; false when the pod is draining, so no request reaches a
// pod about to be deleted (fleet.Drains), or when a model asked for
// before the request waits for the pod's room (fleet.Owed): the request
// waits its turn, behind that model's, as on the local fleet.
func (f *Fleet) Hold(id string, askedAt time.Time) (release func(), ok bool) {
	f.mu.Lock()
	refused := f.owed.Refuses(id, askedAt)
	f.mu.Unlock()
	if refused {
		return nil, false
	}
	end, ok := f.drains.Hold(id)
	if !ok {
		return nil, false
	}
	return func() { end() }, true
}

// drain deletes pod id, stopped by an operator, once the requests it holds
// have ended: at once when it holds none. Its Deployment starts another.
func (f *Fleet) drain(id, model, why string) error {
	f.mu.Lock()
	if f.leaving[id] != nil {
		f.mu.Unlock()
		return nil
	}
	f.leaving[id] = &leaving{model: model}
	f.mu.Unlock()
	n, _ := f.drains.Drain(id, why)
	if n == 0 {
		return f.deleteLeaving(id)
	}
	f.log.Info("draining a pod", "replica", id, "why", why, "in_flight", n)
	return nil
}

// finishDrain ends pod id's drain (fleet.Drains): a pod an operator
// stopped is deleted now; one its Deployment is to lose, by the model's
// next pass.
func (f *Fleet) finishDrain(id string, late int) {
	if late > 0 {
		f.log.Warn("a draining pod is deleted with requests in flight", "replica", id, "requests", late, "drain_timeout", f.drains.Timeout())
	}
	f.mu.Lock()
	l := f.leaving[id]
	f.mu.Unlock()
	switch {
	case l == nil:
		// A pod of a changed entry: its Deployment is rewritten now
		// (rolled).
		if p, err := f.pods.Pods(f.opts.Namespace).Get(id); err == nil {
			f.queue.Add(p.Annotations[annotationModel])
		}
	case l.deployment != "":
		f.queue.Add(l.model)
	default:
		if err := f.deleteLeaving(id); err != nil {
			f.log.Warn("deleting a drained pod", "replica", id, "err", err)
		}
	}
}

// deleteLeaving deletes pod id, stopped by an operator, once: the last
// release and the drain's bound may both end a drain.
func (f *Fleet) deleteLeaving(id string) error {
	f.mu.Lock()
	l := f.leaving[id]
	if l == nil || l.ending || l.deployment != "" {
		f.mu.Unlock()
		return nil
	}
	l.ending = true
	f.mu.Unlock()
	err := f.deletePod(id)
	f.mu.Lock()
	if err != nil && l.deployment == "" {
		// It stays, and serves again: its drain was for nothing.
		f.drains.Forget(id)
	}
	if l.deployment == "" {
		// Else a scale-down took it over while it was deleted
		// (goLocked), and keeps it until the cache sees it go.
		delete(f.leaving, id)
	}
	f.mu.Unlock()
	return err
}

// forgetDrainsLocked drops the pods to go which says: of pods gone, of a
// model removed, or of a Deployment deleted.
func (f *Fleet) forgetDrainsLocked(which func(id string, l *leaving) bool) {
	for id, l := range f.leaving {
		if which(id, l) {
			f.drains.Forget(id)
			delete(f.leaving, id)
		}
	}
}

// drainState is r as its drain says, when it drains (fleet.Drains).
func (f *Fleet) drainState(r fleet.Replica) fleet.Replica {
	if r.State == fleet.Stopping {
		return r
	}
	if s, detail, ok := f.drains.State(r.ID); ok {
		r.State, r.Detail = s, detail
	}
	return r
}

package fleet

import (
	"fmt"
	"time"

	"modelserve/internal/words"
)

// events are the controller's ears for its backend (Events): kept apart
// from Fleet so that its methods are not the fleet's API.
type events struct{ f *Fleet }

func (e events) Ready(id string) {
	f := e.f
	f.mu.Lock()
	r := f.replicas[id]
	f.mu.Unlock()
	if r != nil {
		f.onReady.Tell(r.model)
	}
}

func (e events) Stopping(endpoint string) { e.f.onStopping.Tell(endpoint) }

func (e events) Retiring(id string) bool {
	f := e.f
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.replicas[id]
	return r == nil || r.stopping
}

func (e events) Failed(id string, kind Failure, why string) (time.Duration, bool) {
	f := e.f
	f.mu.Lock()
	r := f.replicas[id]
	var st *modelState
	if r != nil {
		st = f.models[r.model]
	}
	if st == nil {
		f.mu.Unlock()
		// Its model left the catalog: the reconciling stops it.
		return f.opts.Backoff, false
	}
	switch kind {
	case NoEngine, BadEngine:
		st.failedStarts++
		st.parked, st.reason, st.engineMissing = true, why, kind == NoEngine
	case FailedStart, CrashedEarly:
		st.failedStarts++
		if st.failedStarts >= f.opts.MaxFailures {
			st.parked, st.reason, st.lasting = true, why, true
		}
	}
	if !st.parked {
		wait := f.opts.Backoff << min(max(st.failedStarts-1, 0), 6)
		f.mu.Unlock()
		return min(wait, max(time.Minute, f.opts.Backoff)), false
	}
	f.log.Error("model parked", "model", r.model, "failures", st.failedStarts, "reason", st.reason)
	f.backend.Note(id, fmt.Sprintf("modelserve: %s; %s is parked after %d failed %s in a row", why, r.model,
		st.failedStarts, words.Plural(st.failedStarts, "start", "starts")))
	f.mu.Unlock()
	f.keepPark(r)
	return 0, true
}

func (e events) Stable(id string) {
	f := e.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if r := f.replicas[id]; r != nil {
		if st := f.models[r.model]; st != nil && !st.parked {
			st.failedStarts = 0
		}
	}
}

// Ended gives back what replica id was promised, and has the fleet look
// again: it may now place another there.
func (e events) Ended(id string, last Observation, log []string) {
	f := e.f
	f.mu.Lock()
	if r := f.replicas[id]; r != nil {
		r.released, r.last, r.lastLog = true, last, log
		if last.State == Stopped {
			delete(f.replicas, id)
			f.drains.Gone(id)
		}
	}
	f.mu.Unlock()
	f.ended.Store(true) // its memory is the node's again: read it (passNodes)
	f.look()
}

package jobs

import "sync"

// Event is one change of a job, carrying the whole job as it now stands.
type Event struct {
	// Seq numbers the job's changes from 1, in order, with no reuse across
	// restarts (it is stored with the job): an event stream's id, so a
	// client can tell which change it saw last.
	Seq int64 `json:"seq"`
	Job Job   `json:"job"`
}

// subscriberBuffer is how many events a watcher may fall behind before it is
// dropped. A job makes a few events a second at most, so only a watcher that
// has stopped reading gets there, and a job must never wait on one.
const subscriberBuffer = 64

type subscriber struct {
	jobID string // "" for every job
	ch    chan Event
}

// hub hands each job's events to its watchers and to the watchers of all
// jobs. Sending never blocks: a watcher whose buffer is full is dropped, its
// channel closed, and it subscribes again to get the job as it stands.
type hub struct {
	mu     sync.Mutex
	subs   map[string]map[*subscriber]struct{}
	closed bool
}

// add registers a watcher, with first already in its buffer. After close, it
// returns a watcher whose channel is closed.
func (h *hub) add(jobID string, first *Event) *subscriber {
	sub := &subscriber{jobID: jobID, ch: make(chan Event, subscriberBuffer)}
	if first != nil {
		sub.ch <- *first
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(sub.ch)
		return sub
	}
	if h.subs == nil {
		h.subs = map[string]map[*subscriber]struct{}{}
	}
	if h.subs[jobID] == nil {
		h.subs[jobID] = map[*subscriber]struct{}{}
	}
	h.subs[jobID][sub] = struct{}{}
	return sub
}

// remove forgets a watcher and closes its channel, if nothing has yet.
func (h *hub) remove(sub *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropLocked(sub)
}

func (h *hub) dropLocked(sub *subscriber) {
	set := h.subs[sub.jobID]
	if _, ok := set[sub]; !ok {
		return // dropped already, or closed with the hub
	}
	delete(set, sub)
	if len(set) == 0 {
		delete(h.subs, sub.jobID)
	}
	close(sub.ch)
}

// publish hands ev to the job's watchers and to those of every job. The
// caller holds the job's lock, so one job's events go out in order.
func (h *hub) publish(ev Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, key := range [2]string{ev.Job.ID, ""} {
		for sub := range h.subs[key] {
			select {
			case sub.ch <- ev:
			default:
				h.dropLocked(sub)
			}
		}
	}
}

// close ends every watch: the server is going away.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for _, set := range h.subs {
		for sub := range set {
			close(sub.ch)
		}
	}
	h.subs = nil
}

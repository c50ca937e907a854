package fleet

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"modelserve/internal/words"
)

// DefaultDrainTimeout bounds a drain when the fleet's options do not:
// the longest an answer is let run.
const DefaultDrainTimeout = 10 * time.Minute

// Drains count the requests each replica holds (Hold) and drain the
// replicas being retired: the one owner of that rule, on either backend
// (the two fleets had each written it).
// A replica draining takes no new request; its drain ends once the last
// request it holds ends, or once the drain timeout has passed, and its
// fleet is told (ended) to stop it then. Its methods are safe for
// concurrent use, and call nothing of their fleet's while they hold their
// lock; ended is called without it, never from within a method.
type Drains struct {
	clock   clock.WithDelayedExecution
	timeout time.Duration
	ended   func(id string, late int)

	mu     sync.Mutex
	holds  map[string]int
	usedAt map[string]time.Time
	drains map[string]*drain
}

// drain is one replica's drain.
type drain struct {
	why   string
	timer clock.Timer
	// ended is set once the drain is over; late, how many requests were
	// still in flight when the timeout ended it (0 for none: it drained).
	ended bool
	late  int
	// held is whether it held requests when it began.
	held bool
}

// NewDrains are drains timed by c, each bounded by timeout
// (DefaultDrainTimeout unless positive), which tell ended the id of each
// replica whose drain has ended, once, with the requests it still held
// when the timeout ended it (late; 0 when they had ended).
func NewDrains(c clock.WithDelayedExecution, timeout time.Duration, ended func(id string, late int)) *Drains {
	if timeout <= 0 {
		timeout = DefaultDrainTimeout
	}
	return &Drains{clock: c, timeout: timeout, ended: ended,
		holds: map[string]int{}, usedAt: map[string]time.Time{}, drains: map[string]*drain{}}
}

// Timeout is how long a drain may last.
func (ds *Drains) Timeout() time.Duration { return ds.timeout }

// Hold counts a request sent to replica id until release is called; false
// when id drains, so no request reaches a replica about to stop. release
// says whether id holds no request after it (it may be idle now). The
// fleet checks first that id is one to send to at all.
func (ds *Drains) Hold(id string) (release func() (idle bool), ok bool) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if ds.drains[id] != nil {
		return nil, false
	}
	ds.holds[id]++
	ds.usedAt[id] = ds.clock.Now()
	done := false
	return func() bool {
		ds.mu.Lock()
		if done {
			ds.mu.Unlock()
			return false
		}
		done = true
		ds.holds[id]--
		n := ds.holds[id]
		if n == 0 {
			delete(ds.holds, id)
		}
		d := ds.drains[id]
		end := n == 0 && d != nil && !d.ended
		if end {
			ds.endLocked(d, 0)
		}
		ds.mu.Unlock()
		if end {
			ds.ended(id, 0)
		}
		return n == 0
	}, true
}

// Drain begins to drain replica id, saying why: it takes no new request
// from now on. inFlight are the requests it holds: with none, its drain
// has ended already, and its fleet stops it now (ended is not called);
// else ended is called once they have ended, or the timeout passed.
// begun is false when id drains already.
func (ds *Drains) Drain(id, why string) (inFlight int, begun bool) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	n := ds.holds[id]
	if ds.drains[id] != nil {
		return n, false
	}
	d := &drain{why: why, ended: n == 0, held: n > 0}
	ds.drains[id] = d
	if n > 0 {
		d.timer = ds.clock.AfterFunc(ds.timeout, func() {
			// On its own goroutine: a fake clock fires its timers
			// under its lock, which this lock's holders may wait on.
			go ds.timedOut(id, d)
		})
	}
	return n, true
}

// timedOut ends d, id's drain, if it is on still: its timeout passed.
func (ds *Drains) timedOut(id string, d *drain) {
	ds.mu.Lock()
	end, late := ds.drains[id] == d && !d.ended, ds.holds[id]
	if end {
		ds.endLocked(d, late)
	}
	ds.mu.Unlock()
	if end {
		ds.ended(id, late)
	}
}

func (ds *Drains) endLocked(d *drain, late int) {
	d.ended, d.late = true, late
	if d.timer != nil {
		d.timer.Stop()
	}
}

// Keep gives up id's drain, which its model wants again: true when it
// drained still, and takes requests again; false when it has ended (or
// never began), and its fleet stops it.
func (ds *Drains) Keep(id string) bool {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d := ds.drains[id]
	if d == nil || d.ended {
		return false
	}
	ds.forgetLocked(id)
	return true
}

// Forget drops id's drain, if any: the replica has gone, or is stopped
// without one.
func (ds *Drains) Forget(id string) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	ds.forgetLocked(id)
}

func (ds *Drains) forgetLocked(id string) {
	if d := ds.drains[id]; d != nil && d.timer != nil {
		d.timer.Stop()
	}
	delete(ds.drains, id)
}

// Gone forgets replica id: its drain, and when it was last used.
func (ds *Drains) Gone(id string) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	ds.forgetLocked(id)
	delete(ds.usedAt, id)
}

// Prune forgets every replica keep says no to (gone from what the
// fleet runs).
func (ds *Drains) Prune(keep func(id string) bool) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	for id := range ds.usedAt {
		if !keep(id) {
			delete(ds.usedAt, id)
		}
	}
	for id := range ds.drains {
		if !keep(id) {
			ds.forgetLocked(id)
		}
	}
}

// Holds counts the requests id holds now.
func (ds *Drains) Holds(id string) int {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	return ds.holds[id]
}

// UsedAt is when id last took a request: the zero time for never.
func (ds *Drains) UsedAt(id string) time.Time {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	return ds.usedAt[id]
}

// Draining is whether id drains or has drained: it takes no request.
func (ds *Drains) Draining(id string) bool {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	return ds.drains[id] != nil
}

// Ended is whether id's drain is over: its fleet stops it.
func (ds *Drains) Ended(id string) bool {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d := ds.drains[id]
	return d != nil && d.ended
}

// State is id as its drain says: Draining while its requests go on,
// Stopping once its drain has ended, with the sentence that says why; ok
// is false when id does not drain.
func (ds *Drains) State(id string) (s State, detail string, ok bool) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d := ds.drains[id]
	switch {
	case d == nil:
		return "", "", false
	case !d.ended:
		return Draining, d.why + fmt.Sprintf("; draining: waiting for %s in flight to end",
			words.Count(ds.holds[id], "request", "requests")), true
	case d.late > 0:
		return Stopping, fmt.Sprintf("%s; stopped with %s still in flight: %s of draining, the longest an answer may take, passed",
			d.why, words.Count(d.late, "request", "requests"), ds.timeout), true
	case d.held:
		return Stopping, d.why + "; drained: its requests had ended", true
	}
	return Stopping, d.why, true
}

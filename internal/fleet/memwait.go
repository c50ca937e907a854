package fleet

import (
	"sync"
	"time"
)

// How long models asked for waited for memory: from the first look that
// found no room for a replica (it waited for others to be given back, to
// stop, or to fall idle) to the start of the replica that room was made
// for. A request for a cold model waits this, then the engine's load;
// /metrics shows it (modelserve_fleet_memory_wait_seconds), so an operator
// sees what swapping costs the requests beside what loading does. Both
// fleets tally it here.

// MemoryWaitBounds are the tally's buckets' upper bounds.
var MemoryWaitBounds = []time.Duration{
	10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute,
}

// WaitTally is the waits for memory so far: how many, their sum, and
// how many took no longer than each of MemoryWaitBounds.
type WaitTally struct {
	Count   uint64
	Sum     time.Duration
	Buckets []uint64 // by MemoryWaitBounds, cumulative
}

// Waits tallies the waits for memory, and when each model began its
// own. Its zero value is ready; it is safe for concurrent use.
type Waits struct {
	mu    sync.Mutex
	since map[string]time.Time
	t     WaitTally
}

// Waiting says model found no room at now: its wait begins, unless it
// began already.
func (w *Waits) Waiting(model string, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.since == nil {
		w.since = map[string]time.Time{}
	}
	if _, ok := w.since[model]; !ok {
		w.since[model] = now
	}
}

// Placed says a replica of model was started (or its pod placed) at now:
// a wait it had ends, and is tallied.
func (w *Waits) Placed(model string, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	since, ok := w.since[model]
	if !ok {
		return
	}
	delete(w.since, model)
	d := now.Sub(since)
	if w.t.Buckets == nil {
		w.t.Buckets = make([]uint64, len(MemoryWaitBounds))
	}
	w.t.Count++
	w.t.Sum += d
	for i, b := range MemoryWaitBounds {
		if d <= b {
			w.t.Buckets[i]++
		}
	}
}

// Forget drops model's wait untallied: nobody waits for it any more (its
// requests went away, it was removed, it cannot be placed at all).
func (w *Waits) Forget(model string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.since, model)
}

// Tally is the waits so far.
func (w *Waits) Tally() WaitTally {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.t
	t.Buckets = make([]uint64, len(MemoryWaitBounds))
	copy(t.Buckets, w.t.Buckets)
	return t
}

// MemoryWaits are the waits for memory since the fleet was made, for
// /metrics.
func (f *Fleet) MemoryWaits() WaitTally { return f.memWaits.Tally() }

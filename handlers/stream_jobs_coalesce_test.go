package handlers

import (
	"context"
	"testing"
	"time"

	"modelserve/jobs"
)

// TestCoalesceKeepsReadingWhileARedrawWaits: while the page is slow to take
// a redraw, the jobs' changes are still read as fast as they come (the
// jobs' hub drops a watcher whose buffer of 64 fills), and once the page
// takes its redraws again it is told to draw the changes it missed.
func TestCoalesceKeepsReadingWhileARedrawWaits(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in := make(chan jobs.Event, 64) // the hub's buffer a watcher has
	out := coalesce(ctx, in, 5*time.Millisecond)
	<-out // the first draw, at once

	// 1,000 changes while nobody takes a redraw: each would fill the
	// buffer past 64 were in not read meanwhile.
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range 1000 {
			select {
			case in <- jobs.Event{Seq: int64(i)}:
			case <-time.After(2 * time.Second):
				t.Errorf("change %d waited 2 s to be read: a watcher this slow is dropped", i)
				return
			}
			if i%100 == 0 {
				time.Sleep(10 * time.Millisecond) // a few ticks go by
			}
		}
	}()
	<-sent
	// A redraw is waiting, and one is enough for all of them.
	select {
	case <-out:
	case <-time.After(time.Second):
		t.Fatal("no redraw after 1,000 changes")
	}
	// One more change, once the page reads again: drawn too.
	in <- jobs.Event{Seq: 1001}
	select {
	case <-out:
	case <-time.After(time.Second):
		t.Fatal("a change after the page took its redraw was never drawn")
	}
}

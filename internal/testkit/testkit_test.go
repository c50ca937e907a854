package testkit

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// failing is a test that records how it failed, and stops there as
// Fatalf does.
type failing struct {
	testing.TB
	failed string
}

func (f *failing) Helper() {}
func (f *failing) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run runs fn on a failing test, in a goroutine of its own as a test is,
// and says how it failed ("" when it did not).
func run(fn func(t testing.TB)) string {
	f := &failing{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f.failed
}

// TestWaitForFailsSayingWhatItLastSaw: a condition that never holds fails
// the test once the bound passes, with what was waited for and the last
// thing seen; one that comes to hold returns.
func TestWaitForFailsSayingWhatItLastSaw(t *testing.T) {
	looks := 0
	began := time.Now()
	failed := run(func(t testing.TB) {
		WaitFor(t, 50*time.Millisecond, "the answer", func() (bool, string) {
			looks++
			return false, fmt.Sprint("look ", looks)
		})
	})
	if took := time.Since(began); took < 50*time.Millisecond || took > 2*time.Second {
		t.Errorf("gave up after %s; want the bound, 50ms", took)
	}
	if want := fmt.Sprintf("the answer: not within 50ms; last seen: look %d", looks); failed != want {
		t.Errorf("failed with %q; want %q", failed, want)
	}
	n := 0
	if failed := run(func(t testing.TB) {
		WaitFor(t, 5*time.Second, "the third look", func() (bool, string) { n++; return n == 3, "" })
	}); failed != "" || n != 3 {
		t.Errorf("a condition that held on the third look: failed %q after %d looks", failed, n)
	}
}

// TestWaitForValueReturnsTheValueThatHeld: the value the test goes on to
// use is the one that held, not a later one; one that never holds fails
// the test showing the last value.
func TestWaitForValueReturnsTheValueThatHeld(t *testing.T) {
	n := 0
	got := WaitForValue(t, 5*time.Second, "the third look", func() (int, bool) { n++; return n, n == 3 })
	if got != 3 || n != 3 {
		t.Errorf("returned %d after %d looks; want 3 after 3", got, n)
	}
	type seen struct{ Ready int }
	failed := run(func(t testing.TB) {
		WaitForValue(t, 20*time.Millisecond, "two ready", func() (seen, bool) { return seen{Ready: 1}, false })
	})
	if want := "two ready: not within 20ms; last seen: {Ready:1}"; failed != want {
		t.Errorf("failed with %q; want %q", failed, want)
	}
}

// TestStepWaitsUntilTheCodeWaitsAgain: Step returns once the code a step
// woke has set its next timer, so what it did is done; and fails saying
// so when the code never waits again.
func TestStepWaitsUntilTheCodeWaitsAgain(t *testing.T) {
	c := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var ticks []time.Time
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 3 {
			t := c.NewTimer(time.Second)
			now := <-t.C()
			time.Sleep(10 * time.Millisecond) // slow work before the next wait
			ticks = append(ticks, now)
		}
	}()
	WaitWaiters(t, c, 1)
	for i := range 2 {
		Step(t, c, time.Second, 1)
		if len(ticks) != i+1 {
			t.Fatalf("after step %d, %d ticks done; want %d", i+1, len(ticks), i+1)
		}
	}
	c.Step(time.Second)
	<-done
	defer func(d time.Duration) { clockWithin = d }(clockWithin)
	clockWithin = 50 * time.Millisecond
	if failed := run(func(t testing.TB) { Step(t, c, time.Second, 1) }); !strings.Contains(failed, "timers set: 0, want 1") {
		t.Errorf("a step after which nothing waits failed with %q; want it to say no timer is set", failed)
	}
}

package fleet_test

import (
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"modelserve/internal/fleet"
)

// ending is what a Drains told its fleet: which replica's drain ended,
// with how many requests still in flight.
type ending struct {
	id   string
	late int
}

func newDrains(t *testing.T) (*fleet.Drains, *clocktesting.FakeClock, chan ending) {
	t.Helper()
	c := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ended := make(chan ending, 4)
	ds := fleet.NewDrains(c, time.Minute, func(id string, late int) { ended <- ending{id, late} })
	return ds, c, ended
}

// told is the next drain ended, or fails the test when none ends in a
// moment (a drain's timeout ends it on its own goroutine).
func told(t *testing.T, ended chan ending) ending {
	t.Helper()
	select {
	case e := <-ended:
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no drain ended")
		return ending{}
	}
}

func notTold(t *testing.T, ended chan ending, what string) {
	t.Helper()
	select {
	case e := <-ended:
		t.Fatalf("%s: the drain of %s ended", what, e.id)
	default:
	}
}

func TestDrains(t *testing.T) {
	t.Run("a draining replica takes no request and ends with its last", func(t *testing.T) {
		ds, _, ended := newDrains(t)
		release1, _ := ds.Hold("r")
		release2, _ := ds.Hold("r")
		if n, begun := ds.Drain("r", "scaled down"); n != 2 || !begun {
			t.Fatalf("drain began with %d in flight (begun %v), want 2", n, begun)
		}
		if _, ok := ds.Hold("r"); ok {
			t.Fatal("a draining replica took a request")
		}
		if s, detail, _ := ds.State("r"); s != fleet.Draining || detail != "scaled down; draining: waiting for 2 requests in flight to end" {
			t.Errorf("draining: %s, %q", s, detail)
		}
		release1()
		release1() // said twice, counted once
		notTold(t, ended, "one request of two ended")
		release2()
		if e := <-ended; e != (ending{"r", 0}) {
			t.Fatalf("told %+v, want r drained", e)
		}
		if s, detail, _ := ds.State("r"); s != fleet.Stopping || detail != "scaled down; drained: its requests had ended" {
			t.Errorf("drained: %s, %q", s, detail)
		}
	})
	t.Run("a replica holding nothing has drained at once", func(t *testing.T) {
		ds, _, ended := newDrains(t)
		if n, _ := ds.Drain("r", "stopped by an operator"); n != 0 || !ds.Ended("r") {
			t.Fatalf("with none in flight: %d in flight, ended %v", n, ds.Ended("r"))
		}
		notTold(t, ended, "a drain that was over as it began") // its fleet stops it itself
	})
	t.Run("the timeout ends a drain with requests in flight", func(t *testing.T) {
		ds, c, ended := newDrains(t)
		ds.Hold("r") // never released
		ds.Drain("r", "its model was removed")
		c.Step(59 * time.Second)
		notTold(t, ended, "before the timeout")
		c.Step(time.Second)
		if e := told(t, ended); e != (ending{"r", 1}) {
			t.Fatalf("told %+v, want r ended with 1 late", e)
		}
		if _, detail, _ := ds.State("r"); !strings.Contains(detail, "stopped with 1 request still in flight: 1m0s of draining") {
			t.Errorf("timed out: %q", detail)
		}
	})
	t.Run("a drain given up takes requests again, and its timeout is off", func(t *testing.T) {
		ds, c, ended := newDrains(t)
		release, _ := ds.Hold("r")
		ds.Drain("r", "scaled down")
		if !ds.Keep("r") {
			t.Fatal("a drain in progress was not given up")
		}
		if _, ok := ds.Hold("r"); !ok {
			t.Fatal("a replica kept refused a request")
		}
		release()
		if c.HasWaiters() {
			t.Error("the timeout of a drain given up is still set")
		}
		notTold(t, ended, "a drain given up")
	})
}

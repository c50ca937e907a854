package fleet_test

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"modelserve/catalog"
	"modelserve/internal/fleet"
)

// onDemand is a model that keeps no replica and runs up to max while asked
// for, idle after a minute.
func onDemand(max int) catalog.Model {
	m := catalog.Model{Name: "m"}
	m.Scaling.Max, m.Scaling.IdleAfter = max, time.Minute
	return m
}

// A burst's replicas are given back one idle time after the burst, though
// the model is asked for all along; both fleets want what Demands says.
func TestDemandsGiveABurstBack(t *testing.T) {
	c := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ds := fleet.NewDemands(c, func(string) {})
	m := onDemand(3)
	if got := ds.Want(m, c.Now()); got != 0 {
		t.Fatalf("never asked for, m wants %d replicas, want 0", got)
	}
	end, more := ds.Use("m", 3, c.Now())
	if !more {
		t.Error("the first burst did not say m wants more")
	}
	if got := ds.Want(m, c.Now()); got != 3 {
		t.Fatalf("in a burst of 3, m wants %d replicas", got)
	}
	end()
	// One request at a time from now on, never idle.
	c.Step(30 * time.Second)
	ended, _ := ds.Use("m", 1, c.Now())
	defer ended()
	for _, step := range []struct {
		after time.Duration
		want  int
	}{
		{31 * time.Second, 3}, // the burst's window ends: its peak is kept one window more
		{61 * time.Second, 1}, // a window with no burst: given back
	} {
		c.Step(step.after)
		if got := ds.Want(m, c.Now()); got != step.want {
			t.Errorf("at %s, asked for one replica since the burst, m wants %d, want %d", c.Now().Format(time.TimeOnly), got, step.want)
		}
	}
}

// A model that may fall idle before its fleet's next pass has its fleet
// look at it then, and a look then finds it idle.
func TestDemandsLookWhenAModelMayFallIdle(t *testing.T) {
	c := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	looks := make(chan string, 4)
	ds := fleet.NewDemands(c, func(model string) { looks <- model })
	m := onDemand(1)
	end, _ := ds.Use("m", 1, c.Now())
	c.Step(10 * time.Second)
	end()
	if got := ds.Want(m, c.Now()); got != 1 {
		t.Fatalf("just used, m wants %d replicas, want 1", got)
	}
	c.Step(59 * time.Second)
	select {
	case <-looks:
		t.Fatal("the fleet was told to look before m could be idle")
	default:
	}
	c.Step(time.Second)
	select {
	case got := <-looks:
		if got != "m" {
			t.Fatalf("told to look at %q, want m", got)
		}
	default:
		t.Fatal("a minute after m's last request ended, its fleet was not told to look")
	}
	if got := ds.Want(m, c.Now()); got != 0 {
		t.Errorf("idle a minute, m wants %d replicas, want 0", got)
	}
	if _, asked := ds.Of("m"); asked {
		t.Error("m's demand is kept after it fell idle")
	}
	if _, ok := end(); ok {
		t.Error("a request's end said twice counted twice")
	}
}

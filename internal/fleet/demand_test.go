package fleet

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"modelserve/catalog"
	"modelserve/internal/ggufgen"
	"modelserve/internal/testkit"
)

// onDemandEntry is a catalog entry that keeps no replica: loaded when asked for,
// up to max, stopped after idle without a request.
func onDemandEntry(t *testing.T, name string, max int, idle time.Duration) (m catalog.Model) {
	t.Helper()
	m = entry(name, MustWriteModel(t, name+".gguf", ggufgen.Spec{}), 1)
	m.Scaling.Min, m.Scaling.Max, m.Scaling.IdleAfter = 0, max, idle
	return m
}

func TestUseStartsOneReplicaAndIdleStopsIt(t *testing.T) {
	cat := MustCatalog(t)
	clk := clocktesting.NewFakeClock(time.Now())
	fl := MustRun(t, cat, Options{Interval: 50 * time.Millisecond, Clock: clk})
	MustAdd(t, fl.notifying(cat), onDemandEntry(t, "lazy", 1, 700*time.Millisecond))

	// Nothing runs until it is asked for: the fleet has looked, and
	// started nothing.
	fl.mustSync(t)
	if rs := fl.replicasOf("lazy"); len(rs) != 0 {
		t.Fatalf("an on-demand model runs before any request: %+v", rs)
	}
	if h, _ := fl.health("lazy"); h.Want != 0 || h.Parked || h.Unplaceable {
		t.Fatalf("health before any request: %+v", h)
	}

	// Ten first requests at once start one engine between them.
	var wg sync.WaitGroup
	releases := make([]func(), 10)
	for i := range releases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			releases[i] = fl.Use("lazy", 1, clk.Now())
		}()
	}
	wg.Wait()
	r := fl.waitReady(t, "lazy", readyWithin)
	if len(fl.Serving("lazy")) != 1 || len(fl.node.started()) != 1 || r.ID != "lazy-1" {
		t.Fatalf("ten concurrent first requests: serving %+v, engines started %d; want one", fl.Serving("lazy"), len(fl.node.started()))
	}
	if s := fl.Serving("lazy")[0]; s.Endpoint == "" || s.Log != nil {
		t.Errorf("Serving gives %+v; want the endpoint and no log", s)
	}

	// In use, it is never idle, however long the request: the look due
	// when it might have fallen idle finds it in use. Beside the look due,
	// the fleet's tick and the minute after which the replica is stable
	// are on the clock.
	const waiters = 3
	testkit.WaitWaiters(t, clk, waiters)
	testkit.Step(t, clk, 1200*time.Millisecond, waiters)
	fl.mustSync(t)
	if len(fl.Serving("lazy")) != 1 {
		t.Fatal("a replica in use was stopped as idle")
	}
	for _, release := range releases {
		release()
		release() // twice is once
	}

	// Idle for IdleAfter: stopped, and not before; the model is not
	// parked for it.
	fl.mustSync(t)
	testkit.Step(t, clk, 600*time.Millisecond, waiters)
	fl.mustSync(t)
	if rs := fl.replicasOf("lazy"); len(rs) != 1 || rs[0].State != Ready {
		t.Errorf("600ms after its last request, before its IdleAfter of 700ms: %s; want it ready still", jsonOf(rs))
	}
	clk.Step(100 * time.Millisecond)
	testkit.WaitFor(t, 10*time.Second, "lazy stopped when idle", func() (bool, string) {
		rs := fl.replicasOf("lazy")
		return len(rs) == 0, fmt.Sprintf("%+v", rs)
	})
	if h, _ := fl.health("lazy"); h.Want != 0 || h.Parked {
		t.Errorf("health after the idle stop: %+v", h)
	}

	// Asked for again, it starts again.
	release := fl.Use("lazy", 1, clk.Now())
	defer release()
	if r := fl.waitReady(t, "lazy", readyWithin); r.ID != "lazy-2" {
		t.Errorf("started again as %s, want lazy-2", r.ID)
	}
}

// TestAnIdleTimeShorterThanTheIntervalIsKept: the fleet looks when the
// model may fall idle, not at its next tick, so an idle time of a second
// stops the replica though the fleet would otherwise look only hourly.
func TestAnIdleTimeShorterThanTheIntervalIsKept(t *testing.T) {
	cat := MustCatalog(t)
	clk := clocktesting.NewFakeClock(time.Now())
	fl := MustRun(t, cat, Options{Interval: time.Hour, Clock: clk})
	MustAdd(t, fl.notifying(cat), onDemandEntry(t, "quick", 1, time.Second))
	release := fl.Use("quick", 1, clk.Now())
	fl.waitReady(t, "quick", readyWithin)
	release()
	fl.mustSync(t) // the look due a second after the release is set
	clk.Step(time.Second)
	testkit.WaitFor(t, 30*time.Second, "quick stopped a second after its last request", func() (bool, string) {
		rs := fl.replicasOf("quick")
		return len(rs) == 0, fmt.Sprintf("%+v", rs)
	})
}

func TestUseScalesUpToMaxAndBackDown(t *testing.T) {
	cat := MustCatalog(t)
	clk := clocktesting.NewFakeClock(time.Now())
	fl := MustRun(t, cat, Options{Interval: 50 * time.Millisecond, Clock: clk})
	m := onDemandEntry(t, "busy", 2, 600*time.Millisecond)
	m.Scaling.Min = 1
	MustAdd(t, fl.notifying(cat), m)
	fl.waitReady(t, "busy", readyWithin)

	// Asked for more than its Max: it gets its Max.
	release := fl.Use("busy", 5, clk.Now())
	testkit.WaitFor(t, readyWithin, "busy at its max of 2", func() (bool, string) {
		n := len(fl.Serving("busy"))
		return n == 2, fmt.Sprintf("%d serving", n)
	})
	fl.mustSync(t)
	if n := len(fl.replicasOf("busy")); n != 2 {
		t.Fatalf("%d replicas for a max of 2", n)
	}
	release()

	// Idle: back to its Min, which is never stopped.
	fl.mustSync(t)
	clk.Step(600 * time.Millisecond)
	testkit.WaitFor(t, 10*time.Second, "busy back to its min of 1", func() (bool, string) {
		n := len(fl.replicasOf("busy"))
		return n == 1, fmt.Sprintf("%d replicas", n)
	})
	clk.Step(800 * time.Millisecond)
	fl.mustSync(t)
	if n := len(fl.Serving("busy")); n != 1 {
		t.Errorf("%d serving after idle; the min of 1 stays", n)
	}
}

// countingCatalog counts the fleet's reads of the whole catalog.
type countingCatalog struct {
	Catalog
	lists atomic.Int64
}

func (c *countingCatalog) List(ctx context.Context) ([]catalog.Model, error) {
	c.lists.Add(1)
	return c.Catalog.List(ctx)
}

// TestALookReadsNoCatalog: what the requests do (one comes or ends, a
// replica is let go) has the fleet look again at once, with the catalog
// as it last read it, which none of that changed; a Poke or a Sync, after
// a change to the catalog, reads it again.
func TestALookReadsNoCatalog(t *testing.T) {
	cat := MustCatalog(t)
	cc := &countingCatalog{Catalog: cat}
	var passes atomic.Int64
	fl := MustRun(t, cc, Options{Interval: time.Hour, beforePass: func() { passes.Add(1) }})
	MustAdd(t, fl.notifying(cat), onDemandEntry(t, "lazy", 1, time.Hour))
	pass := func(what string, ask func()) {
		t.Helper()
		was := passes.Load()
		ask()
		testkit.WaitFor(t, 5*time.Second, "a pass after "+what, func() (bool, string) {
			return passes.Load() > was, fmt.Sprintf("%d passes", passes.Load()-was)
		})
	}
	lists := cc.lists.Load()
	for range 20 {
		pass("a look", fl.look)
	}
	if n := cc.lists.Load() - lists; n != 0 {
		t.Errorf("20 looks read the catalog %d times; want none", n)
	}
	pass("a poke", fl.Poke)
	if n := cc.lists.Load() - lists; n != 1 {
		t.Errorf("a poke read the catalog %d times; want once", n)
	}
}

// TestAReplicasTimesAreTheFleetsClock: a replica's start and readiness
// are stamped by the fleet's clock, as its demand and drains are timed,
// so its residency (ready time less start time) is what a test steps.
func TestAReplicasTimesAreTheFleetsClock(t *testing.T) {
	cat := MustCatalog(t)
	then := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	clk := clocktesting.NewFakeClock(then)
	fl := MustRun(t, cat, Options{Clock: clk})
	MustAdd(t, fl.notifying(cat), entry("timed", MustWriteModel(t, "timed.gguf", ggufgen.Spec{}), 1))
	r := fl.waitReady(t, "timed", readyWithin)
	if !r.Started.Equal(then) || !r.ReadyAt.Equal(then) {
		t.Errorf("a replica started and ready on a clock stopped at %s says started %s, ready %s", then, r.Started, r.ReadyAt)
	}
}

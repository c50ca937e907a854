package gateway

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"modelserve/catalog"
	"modelserve/internal/fleet"
)

// TestAFleetReadHoldsUpNoOtherRequest: while one request's read of the
// fleet's ready replicas waits (the fleet's lock held by the console),
// the model's other requests count, give back their slots and read the
// replicas themselves; and the slower, older reading, when it ends, does
// not replace the newer one.
func TestAFleetReadHoldsUpNoOtherRequest(t *testing.T) {
	stuck, entered := make(chan struct{}), make(chan struct{})
	var reads atomic.Int32
	p := newPool(func() []fleet.Replica {
		if reads.Add(1) == 1 {
			close(entered)
			<-stuck
			return nil // as the fleet stood before the replica was ready
		}
		return replicas(1, 1)
	}, clock.RealClock{})
	first := make(chan []fleet.Replica)
	go func() { first <- p.read() }()
	<-entered

	others := make(chan []fleet.Replica)
	go func() {
		p.counts()
		p.give("m-1", time.Time{})
		others <- p.read()
	}()
	select {
	case rs := <-others:
		if len(rs) != 1 {
			t.Errorf("a read beside the stuck one gave %v; want the replica ready", rs)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the model's other requests waited for one request's read of the fleet")
	}
	close(stuck)
	if rs := <-first; len(rs) != 1 {
		t.Errorf("the older reading, ending last, left the pool with %v; want the newer reading's replica", rs)
	}
}

// stuckCatalog is a catalog whose List waits for release once stuck is
// set, as a read behind a busy database does.
type stuckCatalog struct {
	models  []catalog.Model
	stuck   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (c *stuckCatalog) List(ctx context.Context) ([]catalog.Model, error) {
	if c.stuck.Load() {
		c.entered <- struct{}{}
		<-c.release
	}
	return c.models, nil
}

// TestACatalogReadHoldsUpNoKnownName: while the catalog is read again (a
// change said, a read slow behind the jobs' writes), a request for a
// model already known is answered from the names as last read; one for a
// name not known waits for the read, and finds the model it added.
func TestACatalogReadHoldsUpNoKnownName(t *testing.T) {
	c := &stuckCatalog{models: []catalog.Model{{Name: "alpha"}}, entered: make(chan struct{}), release: make(chan struct{})}
	n := &names{catalog: c, every: time.Hour, clock: clock.RealClock{}}
	ctx := context.Background()
	if _, ok, err := n.lookup(ctx, "alpha"); !ok || err != nil {
		t.Fatalf("alpha: %v, %v", ok, err)
	}

	c.stuck.Store(true)
	c.models = []catalog.Model{{Name: "alpha"}, {Name: "beta"}}
	n.refresh()
	reading := make(chan bool)
	go func() {
		_, ok, _ := n.lookup(ctx, "alpha") // due to read: it reads
		reading <- ok
	}()
	<-c.entered
	known := make(chan bool)
	go func() {
		_, ok, _ := n.lookup(ctx, "alpha")
		known <- ok
	}()
	select {
	case ok := <-known:
		if !ok {
			t.Error("alpha was not found while the catalog was read again")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a request for a known model waited for another's read of the catalog")
	}
	missed := make(chan bool)
	go func() {
		_, ok, _ := n.lookup(ctx, "beta")
		missed <- ok
	}()
	select {
	case <-missed:
		t.Fatal("a name not known was answered before the read in flight ended")
	case <-time.After(100 * time.Millisecond):
	}
	c.stuck.Store(false)
	close(c.release)
	if !<-reading || !<-missed {
		t.Error("once read, the catalog's names did not hold alpha and beta")
	}
}

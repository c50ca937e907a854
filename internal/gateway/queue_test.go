package gateway

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/auth"
	"modelserve/internal/fleet"
)

// stubFleet serves its replicas as given, counts how often it is asked
// for them, and tells its OnReady listeners when told to.
type stubFleet struct {
	mu    sync.Mutex
	ready []fleet.Replica
	asked int
	tell  []func(string)
}

func (f *stubFleet) Serving(string) []fleet.Replica {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked++
	return f.ready
}
func (f *stubFleet) Hold(string) (func(), bool)                    { return func() {}, true }
func (f *stubFleet) EngineKey(string) string                       { return "k" }
func (f *stubFleet) ModelHealth() []fleet.ModelHealth              { return nil }
func (f *stubFleet) Use(string, int) func()                        { return func() {} }
func (f *stubFleet) OnReady(fn func(string))                       { f.tell = append(f.tell, fn) }
func (f *stubFleet) List(context.Context) ([]catalog.Model, error) { return nil, nil }
func (f *stubFleet) Check(context.Context, string) (auth.Token, error) {
	return auth.Token{}, auth.ErrBadToken
}

func stubGateway(t *testing.T, f *stubFleet) *Gateway {
	t.Helper()
	g, err := New(Options{Catalog: f, Fleet: f, Tokens: f})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestWaitersGetSlotsInArrivalOrder: requests waiting for a model's one
// slot are served in the order they came as the slot frees, and one that
// comes as the slot frees waits behind them rather than take it.
func TestWaitersGetSlotsInArrivalOrder(t *testing.T) {
	rep := fleet.Replica{ID: "m-1", Model: "m", Endpoint: "http://127.0.0.1:1", Load: &fleet.Load{Slots: 1}}
	f := &stubFleet{ready: []fleet.Replica{rep}}
	g := stubGateway(t, f)
	m := catalog.Model{Name: "m"}
	ctx := context.Background()
	p := g.pool("m")

	if _, _, aerr := g.admit(ctx, m, 0, f.ready, nil, false); aerr != nil {
		t.Fatal(aerr)
	}
	const n = 6
	served := make(chan int, n+1)
	admitted := make([]chan struct{}, n+1)
	for i := range n {
		admitted[i] = make(chan struct{})
		go func() {
			if _, _, aerr := g.admit(ctx, m, 0, f.Serving("m"), nil, false); aerr != nil {
				t.Error(aerr)
			}
			served <- i
			<-admitted[i] // holds the slot until told
			p.give(rep.ID, time.Time{})
		}()
		waitFor(t, 5*time.Second, fmt.Sprint(i+1, " waiting"), func() (bool, string) {
			_, w := p.counts()
			return w == i+1, fmt.Sprint(w, " waiting")
		})
	}
	p.give(rep.ID, time.Time{}) // the first request's slot frees
	// One that comes now, with the slot just given, waits behind the six.
	late := make(chan struct{})
	go func() {
		if _, _, aerr := g.admit(ctx, m, 0, f.Serving("m"), nil, false); aerr != nil {
			t.Error(aerr)
		}
		served <- n
		close(late)
	}()
	waitFor(t, 5*time.Second, "the late one waiting", func() (bool, string) {
		_, w := p.counts()
		return w == n, fmt.Sprint(w, " waiting")
	})
	var order []int
	for range n + 1 {
		i := <-served
		order = append(order, i)
		if i < n {
			close(admitted[i])
		}
	}
	<-late
	for i, got := range order {
		if got != i {
			t.Fatalf("served in the order %v, want 0 to %d as they came", order, n)
		}
	}
}

// TestColdWaiterIsWokenByTheFleet: a request waiting for a model's first
// replica goes when the fleet says one is ready, without asking the fleet
// for ready replicas on a timer meanwhile.
func TestColdWaiterIsWokenByTheFleet(t *testing.T) {
	f := &stubFleet{}
	g := stubGateway(t, f)
	got := make(chan fleet.Replica, 1)
	go func() {
		r, _, aerr := g.admit(context.Background(), catalog.Model{Name: "m"}, 0, nil, nil, false)
		if aerr != nil {
			t.Error(aerr)
		}
		got <- r
	}()
	waitFor(t, 5*time.Second, "the request waiting", func() (bool, string) {
		_, w := g.pool("m").counts()
		return w == 1, fmt.Sprint(w, " waiting")
	})
	time.Sleep(150 * time.Millisecond) // a cold start's while
	f.mu.Lock()
	f.ready = []fleet.Replica{{ID: "m-1", Model: "m", Endpoint: "http://127.0.0.1:1"}}
	asked := f.asked
	f.mu.Unlock()
	for _, fn := range f.tell {
		fn("m")
	}
	if r := <-got; r.ID != "m-1" {
		t.Fatalf("admitted to %q, want m-1", r.ID)
	}
	if asked > 1 {
		t.Errorf("the fleet was asked for ready replicas %d times while the request waited for it to tell", asked)
	}
}

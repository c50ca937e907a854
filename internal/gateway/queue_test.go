package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	clocktesting "k8s.io/utils/clock/testing"
	"modelserve/catalog"
	"modelserve/internal/auth"
	"modelserve/internal/fleet"
	"modelserve/internal/testkit"
)

// stubFleet serves its replicas as given, counts how often it is asked
// for them, and tells its OnReady listeners when told to.
// stubCatalog holds the model these tests ask for: a request waiting for
// one the catalog does not have is answered 404.
var stubCatalog = []catalog.Model{{Name: "m"}}

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
func (f *stubFleet) Hold(string, time.Time) (func(), bool)         { return func() {}, true }
func (f *stubFleet) EngineKey(string) string                       { return "k" }
func (f *stubFleet) ModelHealth() []fleet.ModelHealth              { return nil }
func (f *stubFleet) Use(string, int, time.Time) func()             { return func() {} }
func (f *stubFleet) OnReady(fn func(string))                       { f.tell = append(f.tell, fn) }
func (f *stubFleet) List(context.Context) ([]catalog.Model, error) { return stubCatalog, nil }
func (f *stubFleet) Check(context.Context, string) (auth.Token, error) {
	return auth.Token{}, auth.ErrBadToken
}

// admitSent admits a request for m, and says at once it was written to
// the engine, as send does: the requests handed slots after it may go on.
func admitSent(ctx context.Context, g *Gateway, m catalog.Model) (fleet.Replica, *apiError) {
	r, s, aerr := g.admit(ctx, m, time.Now(), 0, nil, nil, false, nil)
	s.sent()
	return r, aerr
}

// fakeClock is a clock a test steps, from a fixed time: a wait the gateway
// times is seen at once and for certain to end, or not to.
func fakeClock() *clocktesting.FakeClock {
	return clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
}

// admitWaits is how many timers a request waiting in admit has set: its
// wait's bound (MaxWait) and its poll.
const admitWaits = 2

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
	rep := fleet.Replica{ID: "m-1", Model: "m", Endpoint: "http://127.0.0.1:1", Load: &fleet.Load{Size: catalog.Size{Slots: 1}}}
	f := &stubFleet{ready: []fleet.Replica{rep}}
	g := stubGateway(t, f)
	m := catalog.Model{Name: "m"}
	ctx := context.Background()
	p := g.pool("m")

	p.read()
	for range depthOf(rep) { // its slot, and its engine's queue
		if _, aerr := admitSent(ctx, g, m); aerr != nil {
			t.Fatal(aerr)
		}
	}
	const n = 6
	served := make(chan int, n+1)
	admitted := make([]chan struct{}, n+1)
	for i := range n {
		admitted[i] = make(chan struct{})
		go func() {
			p.read()
			if _, aerr := admitSent(ctx, g, m); aerr != nil {
				t.Error(aerr)
			}
			served <- i
			<-admitted[i] // holds the slot until told
			p.give(rep.ID, time.Time{})
		}()
		testkit.WaitFor(t, 5*time.Second, fmt.Sprint(i+1, " waiting"), func() (bool, string) {
			_, w := p.counts()
			return w == i+1, fmt.Sprint(w, " waiting")
		})
	}
	p.give(rep.ID, time.Time{}) // the first request's slot frees
	// One that comes now, with the slot just given, waits behind the six.
	late := make(chan struct{})
	go func() {
		p.read()
		if _, aerr := admitSent(ctx, g, m); aerr != nil {
			t.Error(aerr)
		}
		served <- n
		close(late)
	}()
	testkit.WaitFor(t, 5*time.Second, "the late one waiting", func() (bool, string) {
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

// TestColdWaitersAreNotOvertakenOnceAReplicaIsReady: requests waiting for
// a model's first replica are served in the order they came once it is
// ready, before the requests that came after it was ready: those read it
// ready at once, where the waiters' last reading had none (the fleet
// tells them a moment later), and yet they wait behind them.
func TestColdWaitersAreNotOvertakenOnceAReplicaIsReady(t *testing.T) {
	f := &stubFleet{}
	g := stubGateway(t, f)
	m := catalog.Model{Name: "m"}
	ctx := context.Background()
	p := g.pool("m")
	rep := fleet.Replica{ID: "m-1", Model: "m", Endpoint: "http://127.0.0.1:1", Load: &fleet.Load{Size: catalog.Size{Slots: 1}}}

	type admitted struct {
		who  string
		done chan struct{}
	}
	served := make(chan admitted, 8)
	ask := func(who string, total int) {
		go func() {
			p.read() // what a request does as it comes (serve)
			if _, aerr := admitSent(ctx, g, m); aerr != nil {
				t.Error(who, aerr)
				return
			}
			a := admitted{who, make(chan struct{})}
			served <- a
			<-a.done // holds the slot until told
			p.give(rep.ID, time.Time{})
		}()
		testkit.WaitFor(t, 5*time.Second, who+" admitted or waiting", func() (bool, string) {
			inFlight, waiting := p.counts()
			return inFlight+waiting == total, fmt.Sprint(inFlight, " in flight, ", waiting, " waiting")
		})
	}
	cold := []string{"cold 1", "cold 2", "cold 3"}
	for i, who := range cold {
		ask(who, i+1)
	}
	// The replica is ready; the fleet has not told yet, and two requests
	// come that read it ready.
	f.mu.Lock()
	f.ready = []fleet.Replica{rep}
	f.mu.Unlock()
	late := []string{"late 1", "late 2"}
	for i, who := range late {
		ask(who, len(cold)+i+1)
	}
	for _, fn := range f.tell {
		fn("m")
	}

	// Its slot and its engine's queue go to the first two that waited,
	// then each slot that frees to the next in the order they came.
	next := func() admitted {
		select {
		case a := <-served:
			return a
		case <-time.After(5 * time.Second):
			t.Fatal("no request admitted within 5s of a slot free")
			return admitted{}
		}
	}
	first, second := next(), next()
	if got := []string{first.who, second.who}; !slices.Contains(got, "cold 1") || !slices.Contains(got, "cold 2") {
		t.Fatalf("the replica's %d places went to %q, want the first two that waited for it", depthOf(rep), got)
	}
	close(first.done)
	for _, want := range append(cold[2:], late...) {
		a := next()
		if a.who != want {
			t.Fatalf("a slot that freed went to %q, want %q: the one that waited longest", a.who, want)
		}
		close(a.done)
	}
	close(second.done)
}

// TestColdWaiterIsWokenByTheFleet: a request waiting for a model's first
// replica goes when the fleet says one is ready, without asking the fleet
// for ready replicas on a timer meanwhile.
func TestColdWaiterIsWokenByTheFleet(t *testing.T) {
	f := &stubFleet{}
	fc := fakeClock()
	g, err := New(Options{Catalog: f, Fleet: f, Tokens: f, Metrics: prometheus.NewRegistry(), Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan fleet.Replica, 1)
	go func() {
		r, aerr := admitSent(context.Background(), g, catalog.Model{Name: "m"})
		if aerr != nil {
			t.Error(aerr)
		}
		got <- r
	}()
	testkit.WaitFor(t, 5*time.Second, "the request waiting", func() (bool, string) {
		_, w := g.pool("m").counts()
		return w == 1, fmt.Sprint(w, " waiting")
	})
	// A cold start's while, step by step as a fleet that does not tell
	// would be polled: the request, told, only waits.
	testkit.WaitWaiters(t, fc, admitWaits)
	const steps = 8
	for range steps {
		testkit.Step(t, fc, pollCold, admitWaits)
	}
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
	// The cold start is counted as long as the request waited.
	var cold dto.Metric
	if err := g.metrics.coldTime.WithLabelValues("m").(prometheus.Metric).Write(&cold); err != nil {
		t.Fatal(err)
	}
	if h, want := cold.GetHistogram(), (steps * pollCold).Seconds(); h.GetSampleCount() != 1 || h.GetSampleSum() != want {
		t.Errorf("cold starts counted: %d, lasting %.3fs in all; want one of %.3fs", h.GetSampleCount(), h.GetSampleSum(), want)
	}
}

// countingTokens passes one token, "good", until revoked, and counts how
// often it is asked.
type countingTokens struct {
	mu      sync.Mutex
	asked   int
	revoked bool
}

func (c *countingTokens) Check(_ context.Context, tok string) (auth.Token, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked++
	if tok != "good" || c.revoked {
		return auth.Token{}, auth.ErrBadToken
	}
	return auth.Token{Name: "ci"}, nil
}

// TestATokenIsReadOnceAWhileAndRefusedOnceRevoked: a client's requests
// cost the token store one read per TokenEvery, not one each, and a
// token revoked is refused once that while is over; a bad token is asked
// about every time.
func TestATokenIsReadOnceAWhileAndRefusedOnceRevoked(t *testing.T) {
	f := &stubFleet{}
	toks := &countingTokens{}
	fc := fakeClock()
	const every = 200 * time.Millisecond
	g, err := New(Options{Catalog: f, Fleet: f, Tokens: toks, TokenEvery: every, Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(tok string) *apiError {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		_, aerr := g.authenticate(r)
		return aerr
	}
	for i := range 10 {
		if aerr := ask("good"); aerr != nil {
			t.Fatalf("request %d: %v", i, aerr.Message)
		}
	}
	for range 3 {
		if ask("bad") == nil {
			t.Fatal("a bad token passed")
		}
	}
	toks.mu.Lock()
	if toks.asked != 4 {
		t.Errorf("the token store was asked %d times for 10 requests with a good token and 3 with a bad one, want 4", toks.asked)
	}
	toks.revoked = true
	toks.mu.Unlock()
	fc.Step(every - time.Millisecond)
	if aerr := ask("good"); aerr != nil {
		t.Fatalf("the token kept was read again before TokenEvery passed: %v", aerr.Message)
	}
	fc.Step(time.Millisecond)
	if aerr := ask("good"); aerr == nil || aerr.status != http.StatusUnauthorized {
		t.Fatalf("the revoked token once TokenEvery passed: %+v; want 401", aerr)
	}
}

// holdingFleet is stubFleet whose holds say their order: the release of
// the nth hold taken says n.
type holdingFleet struct {
	stubFleet
	mu    sync.Mutex
	holds int
	order chan int
}

func (f *holdingFleet) Hold(string, time.Time) (func(), bool) {
	f.mu.Lock()
	n := f.holds
	f.holds++
	f.mu.Unlock()
	return func() { f.order <- n }, true
}

// TestAColdWaiterGoesOnBeforeTheRequestThatWokeIt: a request waiting for
// a model's first replica, and one that comes as the replica is ready
// (it reads it ready, and its coming hands both a slot: the slot and the
// engine's queue), go on to the replica in the order they came. The later
// one, handed its slot by its own coming, ran on at once while the waiter
// was still being woken, reached the engine first, and the waiter waited
// for its answer as well as its own.
func TestAColdWaiterGoesOnBeforeTheRequestThatWokeIt(t *testing.T) {
	f := &holdingFleet{order: make(chan int, 2)}
	g := stubGateway(t, &f.stubFleet)
	g.opts.Fleet = f
	m := catalog.Model{Name: "m"}
	ctx := context.Background()
	p := g.pool("m")
	rep := fleet.Replica{ID: "m-1", Model: "m", Endpoint: "http://127.0.0.1:1", Load: &fleet.Load{Size: catalog.Size{Slots: 1}}}

	for round := range 20 {
		f.stubFleet.mu.Lock()
		f.stubFleet.ready = nil
		f.stubFleet.mu.Unlock()
		p.read()
		cold := make(chan func(), 1)
		go func() {
			p.read()
			_, s, aerr := g.admit(ctx, m, time.Now(), 0, nil, nil, false, nil)
			if aerr != nil {
				t.Error(aerr)
				close(cold)
				return
			}
			s.sent() // written to the engine
			cold <- s.release
		}()
		testkit.WaitFor(t, 5*time.Second, "the cold one waiting", func() (bool, string) {
			_, w := p.counts()
			return w == 1, fmt.Sprint(w, " waiting")
		})
		// The replica is ready; the fleet has not told yet.
		f.stubFleet.mu.Lock()
		f.stubFleet.ready = []fleet.Replica{rep}
		f.stubFleet.mu.Unlock()
		p.read()
		_, late, aerr := g.admit(ctx, m, time.Now(), 0, nil, nil, false, nil)
		if aerr != nil {
			t.Fatal(aerr)
		}
		late.sent()
		lateRelease := late.release
		coldRelease, ok := <-cold
		if !ok {
			t.FailNow()
		}
		coldRelease()
		lateRelease()
		if c, l := <-f.order, <-f.order; c != 2*round || l != 2*round+1 {
			t.Fatalf("round %d: the waiter took hold %d and the later request hold %d: the later one went on to the replica first",
				round, c, l)
		}
		p.give(rep.ID, time.Time{})
		p.give(rep.ID, time.Time{})
	}
}

// turningFleet is stubFleet whose holds are refused until let is closed,
// as the fleet refuses a request a hold on a replica it keeps for a model
// asked for before the request: the replica is still ready, and the
// request is to wait its turn. It counts the holds asked of it.
type turningFleet struct {
	stubFleet
	let   chan struct{}
	asked atomic.Int64
}

func (f *turningFleet) Hold(string, time.Time) (func(), bool) {
	f.asked.Add(1)
	select {
	case <-f.let:
		return func() {}, true
	default:
		return nil, false
	}
}

// TestARequestTurnedAwayWaitsItsTurn: a request the fleet refuses a hold
// on a replica it still calls ready waits, without an error, and asks
// for the replica again a poll later, not again and again at once; it
// takes the replica once the fleet lets it.
func TestARequestTurnedAwayWaitsItsTurn(t *testing.T) {
	rep := fleet.Replica{ID: "m-1", Model: "m", Endpoint: "http://127.0.0.1:1", Load: &fleet.Load{Size: catalog.Size{Slots: 1}}}
	f := &turningFleet{stubFleet: stubFleet{ready: []fleet.Replica{rep}}, let: make(chan struct{})}
	fc := fakeClock()
	g, err := New(Options{Catalog: f, Fleet: f, Tokens: f, Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	m := catalog.Model{Name: "m"}
	got := make(chan fleet.Replica, 1)
	go func() {
		g.pool("m").read()
		r, aerr := admitSent(context.Background(), g, m)
		if aerr != nil {
			t.Error(aerr)
		}
		got <- r
	}()
	// Past reofferAfter, when a replica a request avoids is offered it
	// again, a step of turnedAwayFor at a time.
	testkit.WaitWaiters(t, fc, admitWaits)
	const steps = int(3 * reofferAfter / turnedAwayFor)
	for range steps {
		testkit.Step(t, fc, turnedAwayFor, admitWaits)
	}
	select {
	case r := <-got:
		t.Fatalf("admitted to %q while the fleet refused it", r.ID)
	default:
	}
	if n := f.asked.Load(); n != int64(steps+1) {
		t.Errorf("the fleet was asked for a hold %d times in %d ms; want once at first and once in each %s after", n, steps*int(turnedAwayFor/time.Millisecond), turnedAwayFor)
	}
	close(f.let)
	fc.Step(turnedAwayFor)
	select {
	case r := <-got:
		if r.ID != rep.ID {
			t.Errorf("admitted to %q, want %s", r.ID, rep.ID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not admitted within 5s of the fleet letting it")
	}
}

// TestARetriedRequestKeepsItsPlace: a request whose replica refused it
// (went away) and that waits for another goes back where it was in the
// queue: the next free slot is its, not that of one that came after it.
// It came back with a new place and waited for the later one's answer
// too.
func TestARetriedRequestKeepsItsPlace(t *testing.T) {
	// The replica that goes away: it takes the connection, and closes it
	// without an answer when told.
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	accepted, refuse := make(chan struct{}), make(chan struct{})
	go func() {
		c, err := gone.Accept()
		if err != nil {
			return
		}
		close(accepted)
		<-refuse
		c.Close()
	}()
	// The replica that stays: it says whose request reached it, and
	// answers each when told.
	arrived, answer := make(chan string, 8), make(chan struct{})
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ User string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		arrived <- req.User
		<-answer
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[],"usage":{"completion_tokens":1,"prompt_tokens":1}}`)
	}))
	defer engine.Close()
	defer close(answer)
	stays := fleet.Replica{ID: "m-2", Model: "m", Endpoint: engine.URL, Load: &fleet.Load{Size: catalog.Size{Slots: 1}}}
	goes := fleet.Replica{ID: "m-1", Model: "m", Endpoint: "http://" + gone.Addr().String(), Load: &fleet.Load{Size: catalog.Size{Slots: 1}}}
	f := &stubFleet{ready: []fleet.Replica{stays}}
	g, err := New(Options{Catalog: f, Fleet: f, Tokens: anyToken{}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/", g.Forward)
	gw := httptest.NewServer(mux)
	defer gw.Close()
	setReady := func(rs ...fleet.Replica) {
		f.mu.Lock()
		f.ready = rs
		f.mu.Unlock()
	}
	// A failed test lets go of the requests still waiting at once.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	statuses := make(chan string, 8)
	ask := func(who string) {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","user":"`+who+`"}`))
			req.Header.Set("Authorization", "Bearer k")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				statuses <- who + ": " + err.Error()
				return
			}
			resp.Body.Close()
			statuses <- fmt.Sprint(who, ": ", resp.StatusCode)
		}()
	}
	waiting := func(n int) {
		testkit.WaitFor(t, 5*time.Second, fmt.Sprint(n, " waiting"), func() (bool, string) {
			_, w := g.pool("m").counts()
			return w == n, fmt.Sprint(w, " waiting")
		})
	}

	// The staying replica is busy with two (its slot and its engine's
	// queue); the first request goes to the other.
	ask("busy1")
	ask("busy2")
	for range 2 {
		select {
		case <-arrived:
		case s := <-statuses:
			t.Fatalf("answered %s before it reached the engine", s)
		}
	}
	setReady(goes, stays)
	ask("first")
	<-accepted
	// The other goes away; a later request waits for the staying one.
	setReady(stays)
	ask("later")
	waiting(1)
	close(refuse)
	waiting(2)
	answer <- struct{}{} // a slot of the staying replica frees
	if who := <-arrived; who != "first" {
		t.Fatalf("%q reached the replica first, want the request that came before it and was refused by the replica that went away", who)
	}
	answer <- struct{}{}
	answer <- struct{}{}
	<-arrived
	answer <- struct{}{}
	for range 4 {
		if s := <-statuses; !strings.HasSuffix(s, ": 200") {
			t.Errorf("answered %s, want 200", s)
		}
	}
}

// TestARequestSlowToGoOnHoldsUpOnlyItsReplicasNext: of two requests
// handed slots in one grant, the later goes on at once when its replica
// is another, however long the first takes to reach its engine, and
// after a moment when its replica is the same. Waiting for the first
// to be written to its engine, a request to a healthy replica waited for
// a dead node's connection to time out.
func TestARequestSlowToGoOnHoldsUpOnlyItsReplicasNext(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas int
		turnWait time.Duration
	}{
		{"another replica", 2, time.Hour},
		{"the same replica", 1, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &stubFleet{}
			g := stubGateway(t, f)
			m := catalog.Model{Name: "m"}
			ctx := context.Background()
			p := g.pool("m")
			p.turnWait = tc.turnWait
			admitted := make(chan fleet.Replica, 2)
			for i := range 2 {
				go func() {
					// Neither says it was written: the first is still on
					// its way to its engine.
					r, _, aerr := g.admit(ctx, m, time.Now(), 0, nil, nil, false, nil)
					if aerr != nil {
						t.Error(aerr)
					}
					admitted <- r
				}()
				testkit.WaitFor(t, 5*time.Second, fmt.Sprint(i+1, " waiting"), func() (bool, string) {
					_, w := p.counts()
					return w == i+1, fmt.Sprint(w, " waiting")
				})
			}
			f.mu.Lock()
			for i := range tc.replicas {
				f.ready = append(f.ready, fleet.Replica{ID: fmt.Sprint("m-", i+1), Model: "m", Endpoint: "http://127.0.0.1:1", Load: &fleet.Load{Size: catalog.Size{Slots: 1}}})
			}
			f.mu.Unlock()
			p.lookAgain() // one grant hands both a slot
			var got []fleet.Replica
			for range 2 {
				select {
				case r := <-admitted:
					got = append(got, r)
				case <-time.After(10 * time.Second):
					t.Fatalf("%d of 2 went on in 10s: the second waits for the first to reach its engine", len(got))
				}
			}
			if a, b := got[0], got[1]; tc.replicas == 2 && a.ID == b.ID {
				t.Fatalf("both were sent to %s, want one to each replica", a.ID)
			}
		})
	}
}

// residentFleet has no replica of m ready, and says m waits for room
// another model keeps for its residency until ends.
type residentFleet struct {
	stubFleet
	ends time.Time
}

func (f *residentFleet) ModelHealth() []fleet.ModelHealth {
	return []fleet.ModelHealth{{Model: "m", Placement: "making room on node local: waiting: alpha-1 is kept 4s more after its load (residency)",
		ResidencyEnds: f.ends}}
}

// TestPastTheQueueWhileRoomIsKeptAnswers429UntilItsEnd: a request for a
// model whose room the fleet keeps for another's residency waits its
// turn; one past the queue's limit is answered 429 with Retry-After the
// residency's rest, rounded up, and the fleet's sentence of what keeps
// it, not "retry in a moment" to come back and find it kept still.
func TestPastTheQueueWhileRoomIsKeptAnswers429UntilItsEnd(t *testing.T) {
	fc := fakeClock()
	f := &residentFleet{ends: fc.Now().Add(3200 * time.Millisecond)}
	g, err := New(Options{Catalog: f, Fleet: f, Tokens: f, MaxQueue: 1, Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	m := catalog.Model{Name: "m"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waited := make(chan *apiError, 1)
	go func() {
		_, aerr := admitSent(ctx, g, m)
		waited <- aerr
	}()
	p := g.pool("m")
	testkit.WaitFor(t, 5*time.Second, "the first request waiting", func() (bool, string) {
		_, w := p.counts()
		return w == 1, fmt.Sprint(w, " waiting")
	})
	past := func() (retryAfter string, aerr *apiError) {
		t.Helper()
		_, aerr = admitSent(ctx, g, m)
		if aerr == nil || aerr.status != http.StatusTooManyRequests {
			t.Fatalf("past the queue's limit: %+v; want 429", aerr)
		}
		rec := httptest.NewRecorder()
		aerr.write(rec)
		return rec.Header().Get("Retry-After"), aerr
	}
	got, aerr := past()
	if got != "4" {
		t.Errorf("Retry-After %q; want 4, the 3.2s left of the residency rounded up", got)
	}
	if !strings.Contains(aerr.Message, "alpha-1 is kept 4s more after its load (residency)") {
		t.Errorf("the 429 says %q; want what keeps the room", aerr.Message)
	}
	testkit.WaitWaiters(t, fc, admitWaits)
	testkit.Step(t, fc, 3*time.Second, admitWaits)
	if got, _ := past(); got != "1" {
		t.Errorf("3s later, Retry-After %q; want 1, the 0.2s left of the residency rounded up", got)
	}
	testkit.Step(t, fc, 200*time.Millisecond, admitWaits)
	if _, aerr := past(); strings.Contains(aerr.Message, "residency") {
		t.Errorf("once the residency ended, the 429 says %q; want a queue's, not the room kept", aerr.Message)
	}
	select {
	case aerr := <-waited:
		t.Fatalf("the first request did not wait its turn: %+v", aerr)
	default:
	}
	cancel()
	<-waited
}

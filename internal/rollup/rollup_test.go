package rollup

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/gateway"
	"modelserve/internal/store"
)

// fakeGateway counts requests in the meters running on a model, as the
// gateway does, and answers a set last minute for Traffic.
type fakeGateway struct {
	mu      sync.Mutex
	running map[string][]*fakeMeter
	traffic map[string]gateway.Traffic
	// measures counts the meters started.
	measures int
}

type fakeMeter struct {
	g    *fakeGateway
	name string
	m    gateway.Measurement
}

func (g *fakeGateway) Measure(name string) Meter {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := &fakeMeter{g: g, name: name}
	g.measures++
	g.running[name] = append(g.running[name], m)
	return m
}

func (g *fakeGateway) Traffic() map[string]gateway.Traffic {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]gateway.Traffic{}
	for k, v := range g.traffic {
		out[k] = v
	}
	return out
}

// serve counts n requests of name, answered at tps tokens a second, with
// a last minute's median of p50.
func (g *fakeGateway) serve(name string, n int, tps float64, p50 time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, m := range g.running[name] {
		m.m.Requests += n
		m.m.Answered += n
		m.m.TokensPerSecond = tps
	}
	g.traffic[name] = gateway.Traffic{Requests: n, Answered: n, P50: p50}
}

func (m *fakeMeter) Stop() {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	list := m.g.running[m.name]
	for i, o := range list {
		if o == m {
			m.g.running[m.name] = append(list[:i:i], list[i+1:]...)
			break
		}
	}
}

func (m *fakeMeter) Read() gateway.Measurement {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	return m.m
}

type fakeCatalog struct {
	mu    sync.Mutex
	names []string
}

func (c *fakeCatalog) List(context.Context) ([]catalog.Model, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []catalog.Model
	for _, n := range c.names {
		out = append(out, catalog.Model{Name: n})
	}
	return out, nil
}

func (c *fakeCatalog) add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.names = append(c.names, name)
}

type fakeFleet struct {
	nodes    []fleet.NodeStatus
	replicas []fleet.Replica
}

func (f *fakeFleet) Nodes() []fleet.NodeStatus { return f.nodes }
func (f *fakeFleet) Replicas() []fleet.Replica { return f.replicas }

// clock is a clock the test steps.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

type rig struct {
	db    *sql.DB
	file  string
	gw    *fakeGateway
	cat   *fakeCatalog
	fl    *fakeFleet
	clock *clock
	rec   *Recorder
}

// t0 is a minute's start.
var t0 = time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)

func mustOpen(t *testing.T, file string) *sql.DB {
	t.Helper()
	db, err := store.Open(context.Background(), file)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func newRig(t *testing.T) *rig {
	t.Helper()
	file := filepath.Join(t.TempDir(), "modelserve.db")
	r := &rig{db: mustOpen(t, file), file: file, clock: &clock{now: t0.Add(5 * time.Second)},
		gw:  &fakeGateway{running: map[string][]*fakeMeter{}, traffic: map[string]gateway.Traffic{}},
		cat: &fakeCatalog{names: []string{"alpha", "beta"}},
		fl: &fakeFleet{
			nodes:    []fleet.NodeStatus{{Name: "n1", PromisedBytes: 800, FreeBytes: 200}},
			replicas: []fleet.Replica{{ID: "a-1", Model: "alpha", Node: "n1", RSSBytes: 500}, {ID: "b-1", Model: "beta", Node: "n1", RSSBytes: 100}},
		}}
	r.rec = r.mustRecorder(t, r.db)
	return r
}

func (r *rig) mustRecorder(t *testing.T, db *sql.DB) *Recorder {
	t.Helper()
	rec, err := New(context.Background(), Deps{DB: db, Catalog: r.cat, Gateway: r.gw, Fleet: r.fl, Now: r.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rec.turnMeters(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.stopMeters)
	return rec
}

// minute records the minute that began at start, with n requests of
// alpha served in it.
func (r *rig) minute(t *testing.T, start time.Time, n int) {
	t.Helper()
	r.gw.serve("alpha", n, 40, 120*time.Millisecond)
	end := start.Add(time.Minute)
	r.clock.set(end)
	if err := r.rec.Record(context.Background(), end); err != nil {
		t.Fatal(err)
	}
	r.clock.set(end.Add(time.Second))
}

func count(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM ` + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRecordKeepsEachMinutesFigures(t *testing.T) {
	r := newRig(t)
	r.minute(t, t0, 3)
	r.minute(t, t0.Add(time.Minute), 5)
	h := r.rec.Hour()
	alpha := h.Models["alpha"]
	if len(alpha) != 3 || !alpha[2].Partial {
		t.Fatalf("alpha's hour = %+v, want two minutes written and the one in progress", alpha)
	}
	for i, want := range []int{3, 5} {
		m := alpha[i]
		if m.Requests != want || m.Minute != t0.Add(time.Duration(i)*time.Minute) || m.P50Ms != 120 || m.TokensPerSecond != 40 || m.Partial {
			t.Errorf("alpha's minute %d = %+v, want %d requests at %v, p50 120 ms, 40 tokens/s", i, m, want, t0.Add(time.Duration(i)*time.Minute))
		}
	}
	// A model with no requests has its quiet minutes, not none.
	if beta := h.Models["beta"]; len(beta) != 3 || beta[0].Requests != 0 {
		t.Errorf("beta's hour = %+v, want three minutes of no requests", beta)
	}
	n := h.Nodes["n1"]
	if len(n) != 3 || n[0].PromisedBytes != 800 || n[0].MeasuredBytes != 600 || n[0].FreeBytes != 200 {
		t.Errorf("n1's hour = %+v, want 800 promised, 600 measured (both replicas' resident memory), 200 free", n)
	}
	if got := count(t, r.db, "model_minutes"); got != 4 {
		t.Errorf("model_minutes holds %d rows, want 4 (two minutes of two models)", got)
	}
}

func TestRestartKeepsTheHour(t *testing.T) {
	r := newRig(t)
	r.minute(t, t0, 3)
	r.minute(t, t0.Add(time.Minute), 7)
	r.rec.stopMeters()
	r.db.Close()

	db := mustOpen(t, r.file)
	rec := r.mustRecorder(t, db)
	alpha := rec.Hour().Models["alpha"]
	if len(alpha) != 3 || alpha[0].Requests != 3 || alpha[1].Requests != 7 || alpha[1].P50Ms != 120 {
		t.Fatalf("after a restart alpha's hour = %+v, want the minutes of 3 and 7 requests and the one in progress", alpha)
	}
	if n := rec.Hour().Nodes["n1"]; len(n) != 3 {
		t.Errorf("after a restart n1's hour = %+v, want two minutes written and now", n)
	}
}

func TestTheHourAndTheTablesAreBounded(t *testing.T) {
	r := newRig(t)
	// Ninety minutes: the hour in memory holds the last sixty.
	for i := range 90 {
		r.minute(t, t0.Add(time.Duration(i)*time.Minute), i)
	}
	alpha := r.rec.Hour().Models["alpha"]
	if len(alpha) != 61 {
		t.Fatalf("alpha's hour holds %d minutes, want 60 and the one in progress", len(alpha))
	}
	if alpha[0].Requests != 30 || alpha[59].Requests != 89 {
		t.Errorf("alpha's hour runs from %d to %d requests, want the minutes of 30 to 89", alpha[0].Requests, alpha[59].Requests)
	}
	if got := count(t, r.db, "model_minutes"); got != 180 {
		t.Errorf("model_minutes holds %d rows, want 180 (a day keeps all 90 minutes of two models)", got)
	}
	// A day later, the first ninety minutes are pruned as the next is written.
	r.minute(t, t0.Add(Keep+30*time.Minute), 1)
	if got := count(t, r.db, "model_minutes"); got != 2+2*59 {
		t.Errorf("a day on, model_minutes holds %d rows, want the minutes of the last day: 2 new and 2×59 of before", got)
	}
	if got := count(t, r.db, "node_minutes"); got != 1+59 {
		t.Errorf("a day on, node_minutes holds %d rows, want 60", got)
	}
}

func TestNoRequestsIsZeroNotAGap(t *testing.T) {
	r := newRig(t)
	h := r.rec.Hour()
	if got := h.Models["alpha"]; len(got) != 1 || got[0].Requests != 0 || !got[0].Partial {
		t.Fatalf("a fresh recorder's alpha = %+v, want only the minute in progress, with no requests", got)
	}
	r.gw.serve("alpha", 2, 10, 50*time.Millisecond)
	if got := r.rec.Hour().Models["alpha"]; got[0].Requests != 2 {
		t.Errorf("the minute in progress counts %d requests, want the 2 served so far", got[0].Requests)
	}
}

func TestAModelAddedIsCountedAtOnce(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.rec.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	// Run's own first look at the catalog, which gamma must miss.
	for started := 0; started < 4; time.Sleep(time.Millisecond) {
		r.gw.mu.Lock()
		started = r.gw.measures
		r.gw.mu.Unlock()
	}
	r.cat.add("gamma")
	r.rec.Changed()
	// Run starts gamma's meter in its own time: wait for it, as the
	// console would, by its figures.
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.gw.serve("gamma", 1, 10, 20*time.Millisecond)
		if got := r.rec.Hour().Models["gamma"]; len(got) == 1 && got[0].Requests > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a model added to the catalog is not counted until the next minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTheWindowMovesAMinuteAtATime(t *testing.T) {
	r := newRig(t)
	r.clock.set(t0.Add(10 * time.Second))
	a := r.rec.Hour()
	r.clock.set(t0.Add(50 * time.Second))
	b := r.rec.Hour()
	if a.Start != b.Start || a.End != b.End || a.End != t0.Add(time.Minute) || a.Start != t0.Add(-Window) {
		t.Errorf("the window at :10 is %v to %v and at :50 %v to %v, want both %v to %v: a chart drawn again within the minute must not move",
			a.Start, a.End, b.Start, b.End, t0.Add(-Window), t0.Add(time.Minute))
	}
}

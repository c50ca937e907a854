package handlers_test

import (
	"context"
	"fmt"
	"modelserve/catalog"
	"modelserve/internal/testkit"
	"net/http"
	"strings"
	"testing"
	"time"

	"modelserve/handlers"
	"modelserve/internal/fleet"
	"modelserve/internal/mirror"
	"modelserve/internal/plan"
)

// benchMirror is a mirror of n files held in memory: one in ten fetching
// (with a job's worth of waiters), the rest present. It can remove, so the
// page draws each file's remove form as the real mirror's does.
type benchMirror struct{ entries []mirror.Entry }

func newBenchMirror(n int) *benchMirror {
	m := &benchMirror{}
	now := time.Now()
	for i := range n {
		e := mirror.Entry{Model: fmt.Sprintf("acme/model-%03d-GGUF", i/5), Revision: "c0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ff",
			Path: fmt.Sprintf("model-%03d-Q4_K_M-%05d-of-00005.gguf", i/5, i%5+1), Size: 4 << 30, State: mirror.Present,
			SHA256: strings.Repeat("ab", 32), BytesDone: 4 << 30, BytesTotal: 4 << 30, Modified: now.Add(-time.Duration(i) * time.Minute)}
		if i%10 == 0 {
			e.State, e.SHA256, e.BytesDone, e.Size = mirror.Fetching, "", int64(i)<<20, int64(i)<<20
		}
		m.entries = append(m.entries, e)
	}
	return m
}

func (m *benchMirror) List(context.Context) ([]mirror.Entry, error) { return m.entries, nil }
func (m *benchMirror) Handler() http.Handler                        { return http.NotFoundHandler() }
func (m *benchMirror) Shown(string) string                          { return "" }
func (m *benchMirror) ShownText(s string) string                    { return s }
func (m *benchMirror) Remove(context.Context, string, string, string, func(string) bool) error {
	return nil
}
func (m *benchMirror) Flights() []mirror.Flight {
	var out []mirror.Flight
	for _, e := range m.entries {
		if e.State == mirror.Fetching {
			out = append(out, mirror.Flight{Entry: e, Waiters: 1})
		}
	}
	return out
}

// benchFleet is n replicas, four a model, on n/10 nodes (at least one),
// every model healthy but one in ten parked, with the pool that names the
// nodes.
func benchFleet(t testing.TB, n int) (*fakeFleet, staticPool) {
	t.Helper()
	nodes := max(1, n/10)
	started := time.Now().Add(-time.Hour)
	f := &fakeFleet{keys: map[string]string{}}
	var decl []string
	for i := range nodes {
		name := fmt.Sprintf("node-%02d", i)
		decl = append(decl, fmt.Sprintf(`{"name": %q, "cpu_cores": 32, "ram_gb": 256, "gpus": [{"class": "L4", "count": 2}]}`, name))
		f.nodes = append(f.nodes, fleet.NodeStatus{Name: name, CPUCores: 32, RAMBytes: 256 * gb, AvailableBytes: 200 * gb,
			FreeBytes: 180 * gb, PromisedBytes: 40 * gb})
	}
	for i := range n {
		model, node := fmt.Sprintf("model-%03d", i/4), fmt.Sprintf("node-%02d", i%nodes)
		id := fmt.Sprintf("%s-%d", model, i%4)
		f.replicas = append(f.replicas, fleet.Replica{ID: id, Model: model, Profile: "cpu", Node: node,
			Endpoint: fmt.Sprintf("http://127.0.0.1:%d", 20000+i), State: fleet.Ready, Started: started,
			ReadyAt: started.Add(5 * time.Second), PID: 1000 + i, Threads: 4, RSSBytes: 3 * gb / 2, EstimateBytes: 2 * gb,
			Load: &fleet.Load{Size: catalog.SizeForSlots(4, 4096), SlotsBusy: i % 4, PromptTokens: 300, PredictedTokens: 50},
			Log:  []string{"main: server is listening"}})
		f.nodes[i%nodes].Replicas = append(f.nodes[i%nodes].Replicas, id)
		if i%4 == 0 {
			h := fleet.ModelHealth{Model: model, Class: "standard", Want: 4, Ready: 4, HardwareExists: true}
			if i%40 == 0 {
				h = fleet.ModelHealth{Model: model, Class: "standard", Want: 4, Parked: true, Failures: 3, HardwareExists: true,
					Reason: "the engine ended before it was ready: out of memory"}
			}
			f.models = append(f.models, h)
		}
	}
	pool, err := plan.ParseNodes("bench", []byte("["+strings.Join(decl, ",")+"]"))
	if err != nil {
		t.Fatal(err)
	}
	return f, staticPool(pool)
}

// BenchmarkLivePages is the time to first byte of the live mirror page
// with 500 files and the live fleet page with 200 replicas, through the
// real mux over loopback HTTP, each beside the same page at 10 (x-of-10).
// The target is under 20 ms: the pages are drawn whole before the first
// byte goes (errors must be known first), so a page that grew with the
// square of its rows would show here.
func BenchmarkLivePages(b *testing.B) {
	at10 := map[string]float64{}
	for _, c := range []struct {
		page  string
		sizes []int
		deps  func(b *testing.B, n int) func(*handlers.Deps)
	}{
		{"mirror", []int{10, 500}, func(b *testing.B, n int) func(*handlers.Deps) {
			return func(d *handlers.Deps) { d.Mirror = newBenchMirror(n) }
		}},
		{"fleet", []int{10, 200}, func(b *testing.B, n int) func(*handlers.Deps) {
			f, pool := benchFleet(b, n)
			return func(d *handlers.Deps) { d.Fleet, d.Pool = f, pool }
		}},
	} {
		for _, n := range c.sizes {
			b.Run(fmt.Sprintf("%s/n=%d", c.page, n), func(b *testing.B) {
				e := newConsoleEnv(b, c.deps(b, n))
				br := e.signedIn()
				ms := testkit.MsToFirstByte(b, func() *http.Response { return br.get("/" + c.page) })
				if n == c.sizes[0] {
					at10[c.page] = ms
					return
				}
				if base := at10[c.page]; base > 0 {
					b.ReportMetric(ms/base, "x-of-10")
				}
				if ms > 20 {
					b.Errorf("the %s page took %.1f ms to its first byte with %d; the target is under 20 ms", c.page, ms, n)
				}
			})
		}
	}
}

// TestLivePagesShowEveryRow keeps the benchmark honest: at 500 files and
// 200 replicas the pages hold every one, so what is timed is the whole page.
func TestLivePagesShowEveryRow(t *testing.T) {
	f, pool := benchFleet(t, 200)
	e := newConsoleEnv(t, func(d *handlers.Deps) { d.Mirror, d.Fleet, d.Pool = newBenchMirror(500), f, pool })
	br := e.signedIn()
	if n := mustDoc(t, br.get("/mirror")).Find(`[data-testid="file-row"]`).Length(); n != 500 {
		t.Errorf("the mirror page shows %d files, want 500", n)
	}
	if n := mustDoc(t, br.get("/fleet")).Find(`[data-testid="replica"]`).Length(); n != 200 {
		t.Errorf("the fleet page shows %d replicas, want 200", n)
	}
}

package fleet

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/ggufgen"
)

// benchModels is how many models the pass benchmarks serve: the scale an
// operator with many fine-tunes and tenants reaches.
const benchModels = 500

// readyBackend is a backend over fake nodes whose replicas are ready the
// moment they start and stay so: nothing changes between passes, so a
// benchmark measures the pass alone, not engines failing their starts.
type readyBackend struct {
	nodes []Node
	mu    sync.Mutex
	ready map[string]bool
	// reads counts the nodes' capacities read (Nodes).
	reads int
}

func (b *readyBackend) Nodes() []NodeInfo {
	b.mu.Lock()
	b.reads += len(b.nodes)
	b.mu.Unlock()
	out := make([]NodeInfo, len(b.nodes))
	for i, n := range b.nodes {
		out[i] = NodeInfo{Name: n.Name(), Capacity: n.Capacity()}
	}
	return out
}
func (b *readyBackend) Check(catalog.Model) error { return nil }
func (b *readyBackend) Start(_ context.Context, p Placement) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ready[p.ID] = true
	return nil
}
func (b *readyBackend) Stop(id, _ string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.ready, id)
}
func (b *readyBackend) Restart(string, string) {}
func (b *readyBackend) Observe(id string) (Observation, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.ready[id] {
		return Observation{}, false
	}
	return Observation{State: Ready, Endpoint: "http://127.0.0.1:1", Started: time.Unix(0, 0)}, true
}
func (b *readyBackend) Log(string) []string             { return nil }
func (b *readyBackend) Note(string, string)             {}
func (b *readyBackend) Wait()                           {}
func (b *readyBackend) Adopt(context.Context) []Adopted { return nil }
func (b *readyBackend) Outlives() bool                  { return false }

// benchFleet is a fleet of ten fake nodes, large enough for every model,
// with benchModels models each placed once: what a pass finds with
// nothing changed. Its loop is not run; the benchmark calls the pass.
func benchFleet(b *testing.B) *Fleet {
	b.Helper()
	var nodes []Node
	for i := range 10 {
		nodes = append(nodes, &fakeNode{name: fmt.Sprintf("node%d", i),
			cap: Capacity{CPUCores: 64, RAMBytes: 1 << 40, AvailableBytes: 1 << 40}})
	}
	cat := MustCatalog(b)
	path := MustWriteModel(b, "bench.gguf", ggufgen.Spec{})
	for i := range benchModels {
		MustAdd(b, cat, entry(fmt.Sprintf("m%03d", i), path, 1))
	}
	f, err := New(Options{Catalog: cat, Nodes: nodes, Engine: "/bin/true", Threads: 1, Residency: -1})
	if err != nil {
		b.Fatal(err)
	}
	f.backend = &readyBackend{nodes: nodes, ready: map[string]bool{}}
	f.reconcile(context.Background(), true)
	if n := len(f.Replicas()); n != benchModels {
		b.Fatalf("%d replicas placed, want %d", n, benchModels)
	}
	return f
}

// BenchmarkPass is one pass with the catalog read again and nothing
// changed: the tick's, and a Sync's.
func BenchmarkPass(b *testing.B) { benchPasses(b, true) }

// BenchmarkLook is one look (the pass with the catalog as last read) with
// nothing changed: the one on the swap path, after a request ends or a
// replica is let go.
func BenchmarkLook(b *testing.B) { benchPasses(b, false) }

func benchPasses(b *testing.B, reread bool) {
	f := benchFleet(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		f.reconcile(ctx, reread)
	}
}

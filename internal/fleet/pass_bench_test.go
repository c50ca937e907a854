package fleet

import (
	"context"
	"fmt"
	"testing"

	"modelserve/internal/ggufgen"
)

// benchModels is how many models the pass benchmarks serve: the scale an
// operator with many fine-tunes and tenants reaches.
const benchModels = 500

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
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(func() {
		cancel()
		f.stopAll("the benchmark is over")
		f.backend.Wait()
	})
	f.reconcile(ctx, true)
	if n := len(f.Replicas()); n != benchModels {
		b.Fatalf("%d replicas placed, want %d", n, benchModels)
	}
	return f
}

// BenchmarkPass is one pass with the catalog read again and nothing
// changed: the tick's, and a Sync's.
func BenchmarkPass(b *testing.B) {
	f := benchFleet(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		f.reconcile(ctx, true)
	}
}

// BenchmarkLook is one look (the pass with the catalog as last read) with
// nothing changed: the one on the swap path, after a request ends or a
// replica is let go.
func BenchmarkLook(b *testing.B) {
	f := benchFleet(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		f.reconcile(ctx, false)
	}
}

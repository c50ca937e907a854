package plan

import (
	"context"
	"testing"
	"time"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
)

// twentyQuants are the quantisations of the 20-file repository.
var twentyQuants = []string{"Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "IQ3_XS", "IQ3_M", "IQ4_XS", "IQ4_NL", "Q4_0", "Q4_1",
	"Q4_K_S", "Q4_K_M", "Q5_0", "Q5_1", "Q5_K_S", "Q5_K_M", "Q6_K", "Q8_0", "Q6_K_L", "Q5_K_L"}

// twentyFiles is a repository of 20 GGUF files of 4 GiB each: a 7B's
// header and a sparse rest.
func twentyFiles(tb testing.TB) (*world, hf.Repo) {
	tb.Helper()
	w := newWorld(tb, mustNodes(tb, fleetNodes))
	w.hub.AddRepo("acme/twenty", hubtest.RepoOptions{})
	spec := ggufgen.Mistral7B()
	spec.PadTo = 4 << 30
	s := mustSparse(tb, spec)
	for _, q := range twentyQuants {
		path := "Mistral-7B-Instruct-v0.3-" + q + ".gguf"
		w.hub.AddFileSpec("acme/twenty", hubtest.FileSpec{Path: path, Size: s.size, Gen: s.gen, SHA256: fakeSHA(s.data, s.size, path)})
	}
	return w, w.repo(tb, "acme/twenty")
}

func TestPlan20FilesReadsHeadersOnly(t *testing.T) {
	w, repo := twentyFiles(t)
	start := time.Now()
	pl, err := w.planner.Plan(context.Background(), repo, Request{Context: 32768})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	served := w.served(repo)
	var total int64
	for _, f := range repo.Files {
		total += f.Size
	}
	t.Logf("20 files of 4 GiB (%d GB): %d headers, %.1f MB over the wire, %v", total>>30, w.reads.Load(), float64(served)/1e6, took)
	if len(pl.Sets) != 20 || w.reads.Load() != 20 || served >= 100e6 || (took >= 2*time.Second && !raceEnabled) {
		t.Errorf("%d sets, %d headers, %d bytes, %v; want 20, 20, under 100 MB, under 2 s", len(pl.Sets), w.reads.Load(), served, took)
	}
}

func BenchmarkPlan20Files(b *testing.B) {
	w, repo := twentyFiles(b)
	nodes := mustNodes(b, fleetNodes)
	before := w.served(repo)
	for b.Loop() {
		// A planner of its own each time: its cache would make every
		// plan after the first read nothing.
		p := w.newPlanner(b, nodes)
		if _, err := p.Plan(context.Background(), repo, Request{Context: 32768}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(w.served(repo)-before)/float64(b.N), "bytes-served/op")
}

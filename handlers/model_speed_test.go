package handlers_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/handlers"
	"modelserve/internal/fleet"
	"modelserve/internal/hf"
	"modelserve/internal/mirror"
)

// TestSpeedMeasuredBesideTheEstimate: once a job has served a model, the
// catalog and the fleet pages show the tokens a second its smoke test
// measured beside the plan's estimate, which says what it is from; a
// model no job measured shows the estimate alone.
func TestSpeedMeasuredBesideTheEstimate(t *testing.T) {
	ff := &fakeFleet{models: []fleet.ModelHealth{{Model: "tiny", Class: "standard", Want: 1, Ready: 1}, {Model: "fresh", Class: "standard", Want: 1, Ready: 1}}}
	e := newConsoleEnv(t, func(d *handlers.Deps) { d.Fleet = ff })
	ctx := context.Background()
	commit := strings.Repeat("c0ffee", 7)[:40]
	content := bytes.Repeat([]byte("w"), 2_000_000)
	for _, name := range []string{"tiny", "fresh"} {
		src := filepath.Join(t.TempDir(), "model-Q4_K_M.gguf")
		if err := os.WriteFile(src, content, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(content)
		if _, err := e.mirror.Fetch(ctx, []mirror.File{{Model: name, Revision: hf.Short(commit), Path: "model-Q4_K_M.gguf",
			URL: "file://" + src, Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:])}}, nil); err != nil {
			t.Fatal(err)
		}
		m := catalog.Model{Name: name, Source: src, ContextLength: 2048, Weights: []string{"model-Q4_K_M.gguf"},
			Origin:   &catalog.Origin{Repo: "acme/Tiny-GGUF", Revision: commit},
			Profiles: []catalog.Profile{{Name: "cpu", Engine: "llamacpp", Priority: 100}}, Scaling: catalog.Scaling{Min: 1, Max: 1}}
		if err := e.catalog.Add(ctx, m, "test"); err != nil {
			t.Fatal(err)
		}
	}
	j := doneJob("serve-1-done", time.Now().Add(-time.Minute))
	j.Model = "tiny"
	mustInsertJob(t, e.db, j)

	b := e.signedIn()
	const estimate = "≈ 10000 tokens/s estimated"
	for _, tt := range []struct{ page, row string }{
		{"/catalog", `[data-testid="model-row"]`},
		{"/fleet", `[data-testid="model-health"]`},
	} {
		doc := mustStatus(t, b.get(tt.page), http.StatusOK)
		tiny := doc.Find(tt.row + `[data-model="tiny"] [data-testid="speed"]`)
		if got := tiny.Find(`[data-testid="speed-measured"]`).Text(); got != "812 tokens/s measured" {
			t.Errorf("%s: tiny measured %q", tt.page, got)
		}
		if got := tiny.Find(`a[href="/jobs/serve-1-done"]`).Length(); got != 1 {
			t.Errorf("%s: tiny's measured speed links its job %d times, want once", tt.page, got)
		}
		got := tiny.Text()
		for _, want := range []string{"by its smoke test", estimate, "from 20 GB/s of memory bandwidth over 2 MB of weights a token"} {
			if !strings.Contains(got, want) {
				t.Errorf("%s: tiny's speed says %q; want %q in it", tt.page, got, want)
			}
		}
		fresh := doc.Find(tt.row + `[data-model="fresh"] [data-testid="speed"]`)
		if fresh.Find(`[data-testid="speed-measured"]`).Length() != 0 || fresh.Find(`[data-testid="speed-estimate"]`).Text() != estimate {
			t.Errorf("%s: fresh's speed says %q; want the estimate alone", tt.page, strings.Join(strings.Fields(fresh.Text()), " "))
		}
	}
}

// TestServePageShowsWhatAServedFileMeasured: on the serve page, the row of
// a file a model was served from shows what its smoke test measured
// beside the estimate; a file never served shows the estimate alone. The
// pages read before the model was served do not hide it afterwards.
func TestServePageShowsWhatAServedFileMeasured(t *testing.T) {
	e, _ := plannedEnv(t)
	ctx := context.Background()
	b := e.signedIn()
	// Read as the job runs, before the model is in the catalog: the
	// figures read then must not hide the job's from the pages after it.
	mustStatus(t, b.get("/serve?repo="+llamaRepo), http.StatusOK)
	mustStatus(t, b.get("/catalog"), http.StatusOK)
	m := catalog.Model{Name: "chatty", Source: "/nowhere", ContextLength: 2048, Weights: []string{"Llama-3.1-8B-Instruct-Q8_0.gguf"},
		Origin:   &catalog.Origin{Repo: llamaRepo, Revision: strings.Repeat("ab", 20)},
		Profiles: []catalog.Profile{{Name: "cpu", Engine: "llamacpp", Priority: 100}}, Scaling: catalog.Scaling{Min: 1, Max: 1}}
	if err := e.catalog.Add(ctx, m, "test"); err != nil {
		t.Fatal(err)
	}
	j := doneJob("serve-1-done", time.Now().Add(-time.Minute))
	j.Model, j.Commit = "chatty", m.Origin.Revision // the version it serves
	mustInsertJob(t, e.db, j)

	doc := mustStatus(t, b.get("/catalog"), http.StatusOK)
	if got := doc.Find(`[data-testid="model-row"][data-model="chatty"] [data-testid="speed-measured"]`).Text(); got != "812 tokens/s measured" {
		t.Errorf("the catalog after the job says %q measured", got)
	}
	doc = mustStatus(t, b.get("/serve?repo="+llamaRepo), http.StatusOK)
	row := func(set string) string {
		return `[data-testid="set-row"][data-set="` + set + `"] `
	}
	q8 := doc.Find(row("Llama-3.1-8B-Instruct-Q8_0") + `[data-testid="tps"]`)
	if got := q8.Find(`[data-testid="tps-measured"]`).Text(); got != "812 tokens/s measured, by chatty's smoke test" {
		t.Errorf("the served file's row says %q measured", got)
	}
	if !strings.HasPrefix(strings.TrimSpace(q8.Text()), "≈ ") {
		t.Errorf("the served file's row says %q: want the estimate first", strings.Join(strings.Fields(q8.Text()), " "))
	}
	if n := doc.Find(row("Llama-3.1-8B-Instruct-Q4_K_M") + `[data-testid="tps-measured"]`).Length(); n != 0 {
		t.Errorf("a file never served shows %d measured speeds", n)
	}
}

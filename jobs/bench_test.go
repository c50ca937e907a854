package jobs

import (
	"testing"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// BenchmarkServePresent is a job for a model the mirror already holds, from
// Start until it is in the catalog: what serving a model again costs when
// nothing needs fetching (target: under 200 ms).
func BenchmarkServePresent(b *testing.B) {
	e := newEnv(b, withNodeMemory(64<<30))
	e.addModel(tinyRepo, hubtest.RepoOptions{}, map[string]ggufgen.Spec{tinyFile: {}})
	if j := MustEnd(b, e.srv, MustStart(b, e.srv, Request{Repo: tinyRepo, Replicas: 1}).ID); j.State != Done {
		b.Fatalf("the first job ended %s: %s", j.State, j.Error)
	}
	b.ResetTimer()
	for b.Loop() {
		if j := MustEnd(b, e.srv, MustStart(b, e.srv, Request{Repo: tinyRepo, Replicas: 1}).ID); j.State != Done {
			b.Fatalf("job ended %s: %s", j.State, j.Error)
		}
	}
	b.StopTimer()
	if n := e.hub.Requests(tinyRepo, tinyFile); n != 1 {
		b.Errorf("the file was fetched %d times; the mirror had it", n)
	}
}

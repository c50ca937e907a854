package jobs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/words"
)

// TestAMirrorThatMakesNoProgressEndsWithASentence: a registry that keeps
// its connection open and sends nothing more held the job's mirror step
// for ever (the mirror's own try waits a minute, then asks again, and
// again). With no progress for the bound, the job fails saying so and what
// to do; what arrived stays a partial file, not the whole in its place;
// and a retry continues from it rather than fetch it again.
func TestAMirrorThatMakesNoProgressEndsWithASentence(t *testing.T) {
	e := newEnv(t, withNodeMemory(64<<30), func(e *testEnv) { e.deps.MirrorNoProgress = time.Second })
	e.addModel(tinyRepo, hubtest.RepoOptions{}, map[string]ggufgen.Spec{tinyFile: {}})
	size := int64(len(ggufgen.Bytes(ggufgen.Spec{})))
	const before = 64 << 10
	e.hub.StallNext(tinyRepo, tinyFile, before, 1000)

	j := MustEnd(t, e.srv, MustStart(t, e.srv, Request{Repo: tinyRepo, Replicas: 1}).ID)
	st := MustStep(t, j, StepMirror)
	want := "the mirror made no progress on " + tinyFile + " for 1s, with " + words.SizeOf(before, size) + " arrived: the registry stopped sending it"
	if j.State != Failed || st.State != Failed || !strings.HasPrefix(j.Error, want) ||
		!strings.HasSuffix(j.Error, "retry the job to continue from there, once the registry answers again") {
		t.Fatalf("job ended %s, mirror step %s: %q; want it failed: %q…", j.State, st.State, j.Error, want)
	}
	if p := partials(t, e.mirrorDir); len(p) != 1 {
		t.Errorf("partial files %v; want the one that stalled, kept to continue", p)
	}
	if whole := filepath.Join(e.mirrorDir, "tiny", j.Commit[:12], tinyFile); fileExists(whole) {
		t.Errorf("%s is in place after a fetch that never finished", whole)
	}

	e.hub.ClearFaults(tinyRepo, tinyFile)
	r, err := e.srv.Retry(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if end := MustEnd(t, e.srv, r.ID); end.State != Done {
		t.Fatalf("the retry ended %s: %s", end.State, end.Error)
	}
	// Fetched again from the start, the registry would have sent the
	// stalled bytes twice.
	if served := e.hub.BytesServed(tinyRepo, tinyFile); served > size+before/2 {
		t.Errorf("the registry served %d bytes of a %d-byte file; want the retry to continue from the %d that arrived", served, size, before)
	}
}

// TestAMirrorStillFetchingAfterItsBoundEnds: a registry that trickles never
// stalls a try, and held the job as long as it trickled; the mirror step
// ends at its bound (six hours unless set, as the reference pipeline's).
func TestAMirrorStillFetchingAfterItsBoundEnds(t *testing.T) {
	e := newEnv(t, withNodeMemory(64<<30), func(e *testEnv) { e.deps.MirrorWithin = time.Second })
	e.addModel(tinyRepo, hubtest.RepoOptions{}, map[string]ggufgen.Spec{tinyFile: {}})
	e.hub.Trickle(tinyRepo, tinyFile, 32<<10)

	j := MustEnd(t, e.srv, MustStart(t, e.srv, Request{Repo: tinyRepo, Replicas: 1}).ID)
	want := "the mirror had not fetched " + tinyFile + " after 1s, with "
	if st := MustStep(t, j, StepMirror); j.State != Failed || st.State != Failed || !strings.HasPrefix(j.Error, want) {
		t.Fatalf("job ended %s, mirror step %s: %q; want it failed: %q…", j.State, st.State, j.Error, want)
	}
	if p := partials(t, e.mirrorDir); len(p) != 1 {
		t.Errorf("partial files %v; want the one cut short, kept to continue", p)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

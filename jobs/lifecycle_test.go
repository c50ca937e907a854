package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
	"modelserve/internal/testkit"
)

const (
	tinyRepo = "acme/Tiny-GGUF"
	tinyFile = "tiny-Q4_K_M.gguf"
)

// waitFetching waits until the job's mirror step has at least that share
// of the bytes, and not all of them.
func waitFetching(t *testing.T, s *Server, id string, share float64) Step {
	t.Helper()
	var st Step
	testkit.WaitFor(t, 20*time.Second, fmt.Sprintf("the fetch under way, past %.0f%%", share*100), func() (bool, string) {
		j, err := s.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		st, _ = j.Step(StepMirror)
		return st.BytesDone > 0 && float64(st.BytesDone) >= share*float64(st.BytesTotal) && st.BytesDone < st.BytesTotal,
			fmt.Sprintf("job %s, %d of %d bytes fetched", j.State, st.BytesDone, st.BytesTotal)
	})
	return st
}

// TestRestartMidFetch stops the server half way through a download, starts
// another on the same database and mirror, and finds the job finished from
// where it stopped: the rest of the file fetched rather than all of it, at
// the commit the job began with though the branch has moved since, and the
// steps done before not announced again.
func TestRestartMidFetch(t *testing.T) {
	e := newEnv(t, withNodeMemory(64<<30))
	content := ggufgen.Bytes(ggufgen.Spec{})
	e.hub.AddRepo(tinyRepo, hubtest.RepoOptions{})
	commit := e.hub.AddFile(tinyRepo, tinyFile, content)
	e.hub.Trickle(tinyRepo, tinyFile, 256<<10)

	j := MustStart(t, e.srv, Request{Repo: tinyRepo, Replicas: 1})
	// Far enough that fetching it all again would show in the bytes served.
	st := waitFetching(t, e.srv, j.ID, 0.4)
	if !strings.HasPrefix(st.Detail, "fetching: ") || !strings.HasSuffix(st.Detail, "%)") {
		t.Errorf("the mirror step says %q while fetching", st.Detail)
	}
	e.srv.Close()

	stopped, _, err := load(context.Background(), e.db, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stopped.State != Running || MustStep(t, stopped, StepMirror).State != Running {
		t.Fatalf("after Close the job is stored %s with steps %+v; want it running, to resume", stopped.State, stopped.Steps)
	}
	if len(partials(t, e.mirrorDir)) != 1 {
		t.Fatalf("the mirror holds no partial file to resume: %v", partials(t, e.mirrorDir))
	}

	// Meanwhile the branch moves on to other bytes under the same name.
	e.hub.AddFile(tinyRepo, tinyFile, ggufgen.Bytes(ggufgen.Spec{Name: "another"}))
	e.hub.ClearFaults(tinyRepo, tinyFile)

	d := e.deps
	d.Mirror = MustMirror(t, e.mirrorDir, e.client)
	again := MustServer(t, d)
	events, stop := again.Subscribe("")
	defer stop()
	if err := again.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	end := MustEnd(t, again, j.ID)
	if end.State != Done {
		t.Fatalf("the resumed job ended %s: %s", end.State, end.Error)
	}
	if served := e.hub.BytesServed(tinyRepo, tinyFile); served < int64(len(content)) || served > int64(len(content))*6/5 {
		t.Errorf("the Hub served %d bytes of a %d-byte file: the fetch started over rather than resumed", served, len(content))
	}
	m, err := e.catalog.Get(context.Background(), "tiny")
	if err != nil {
		t.Fatal(err)
	}
	if m.Origin.Revision != commit || end.Commit != commit {
		t.Errorf("the resumed job served commit %s (job says %s); want the pinned %s", m.Origin.Revision, end.Commit, commit)
	}
	for len(events) > 0 {
		ev := <-events
		if reg, _ := ev.Job.Step(StepRegistry); reg.State == Running {
			t.Errorf("the resumed job announced the registry step running again: %+v", reg)
		}
	}
	if err := again.Resume(context.Background()); err == nil {
		t.Error("a second Resume was accepted")
	}
}

// TestCancelAndRetry cancels a job mid-fetch, then retries it: the cancel
// leaves nothing in the catalog, and the retry is a new job that finishes
// the same request from the bytes already there.
func TestCancelAndRetry(t *testing.T) {
	e := newEnv(t, withNodeMemory(64<<30))
	e.addModel(tinyRepo, hubtest.RepoOptions{}, map[string]ggufgen.Spec{tinyFile: {}})
	e.hub.Trickle(tinyRepo, tinyFile, 128<<10)

	j := MustStart(t, e.srv, Request{Repo: tinyRepo, Replicas: 1, Description: "tiny, for tests"})
	waitFetching(t, e.srv, j.ID, 0)
	began := time.Now()
	c, err := e.srv.Cancel(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("the cancel took %s", took)
	}
	if c.State != Cancelled || MustStep(t, c, StepMirror).State != Failed || MustStep(t, c, StepMirror).Detail != "cancelled" {
		t.Fatalf("cancelled job %+v", c)
	}
	if got, _ := e.srv.Get(context.Background(), j.ID); got.State != Cancelled {
		t.Errorf("Get says %s after the cancel", got.State)
	}
	if names := e.catalogNames(); len(names) != 0 {
		t.Errorf("a cancelled job left %v in the catalog", names)
	}
	if _, err := e.srv.Cancel(context.Background(), j.ID); !errors.Is(err, ErrConflict) {
		t.Errorf("cancelling it again: %v; want ErrConflict", err)
	}

	e.hub.ClearFaults(tinyRepo, tinyFile)
	r, err := e.srv.Retry(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.ID == j.ID || r.RetryOf != j.ID || r.Request.Description != "tiny, for tests" {
		t.Errorf("retry %+v of %s", r, j.ID)
	}
	end := MustEnd(t, e.srv, r.ID)
	if end.State != Done {
		t.Fatalf("the retry ended %s: %s", end.State, end.Error)
	}
	if p := partials(t, e.mirrorDir); len(p) != 0 {
		t.Errorf("partial files left behind: %v", p)
	}
	if _, err := e.srv.Retry(context.Background(), r.ID); !errors.Is(err, ErrConflict) {
		t.Errorf("retrying a job that is done: %v; want ErrConflict", err)
	}
	if _, err := e.srv.Retry(context.Background(), "serve-1-nothing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("retrying no job: %v; want ErrNotFound", err)
	}
}

// TestManyJobsAtOnce starts twenty jobs for five models together: all end
// done, and each file is fetched from the Hub once.
func TestManyJobsAtOnce(t *testing.T) {
	e := newEnv(t, withNodeMemory(64<<30))
	var repos []string
	for i := range 5 {
		repo := fmt.Sprintf("acme/Model%d-GGUF", i)
		e.addModel(repo, hubtest.RepoOptions{}, map[string]ggufgen.Spec{
			tinyFile: {Name: repo}, "tiny-Q8_0.gguf": {Name: repo + " Q8"}})
		repos = append(repos, repo)
	}
	// The starts run beside each other; a start that fails is reported
	// here, as t.Fatal may only be called from the test's own goroutine.
	var wg sync.WaitGroup
	ids := make(chan string, 20)
	failed := make(chan error, 20)
	for i := range 20 {
		wg.Go(func() {
			j, err := timedStart(e.srv, Request{Repo: repos[i%5], Replicas: 1})
			if err != nil {
				failed <- err
				return
			}
			ids <- j.ID
		})
	}
	wg.Wait()
	close(ids)
	close(failed)
	for err := range failed {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	for id := range ids {
		if j := MustEnd(t, e.srv, id); j.State != Done {
			t.Errorf("job %s ended %s: %s", id, j.State, j.Error)
		}
	}
	for _, repo := range repos {
		if n := e.hub.Requests(repo, tinyFile); n != 1 {
			t.Errorf("%s/%s was fetched %d times", repo, tinyFile, n)
		}
		if n := e.hub.Requests(repo, "tiny-Q8_0.gguf"); n != 0 {
			t.Errorf("%s/tiny-Q8_0.gguf, not asked for, was fetched %d times", repo, n)
		}
	}
	list, total, err := e.srv.List(context.Background(), ListOptions{Limit: 100})
	if err != nil || total != 20 || len(list) != 20 {
		t.Fatalf("list has %d of %d jobs (%v)", len(list), total, err)
	}
	if names := e.catalogNames(); len(names) != 5 {
		t.Errorf("catalog %v; want the five models", names)
	}
}

// TestList pages through jobs newest first, by offset and by cursor.
func TestList(t *testing.T) {
	e := newEnv(t)
	var ids []string
	for i := range 5 {
		// Each fails at once (no such repository), which is all a list needs.
		j := MustStart(t, e.srv, Request{Repo: fmt.Sprintf("acme/none-%d", i)})
		MustEnd(t, e.srv, j.ID)
		ids = append(ids, j.ID)
		time.Sleep(2 * time.Millisecond) // distinct start times
	}
	slices.Reverse(ids)
	page := func(o ListOptions) []string {
		t.Helper()
		list, total, err := e.srv.List(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if total != 5 {
			t.Errorf("total %d, want 5", total)
		}
		var out []string
		for _, j := range list {
			if len(j.Steps) == 0 {
				t.Errorf("listed job %s without its steps", j.ID)
			}
			out = append(out, j.ID)
		}
		return out
	}
	cases := []struct {
		name string
		opts ListOptions
		want []string
	}{
		{"all", ListOptions{}, ids},
		{"first two", ListOptions{Limit: 2}, ids[:2]},
		{"next two by offset", ListOptions{Limit: 2, Offset: 2}, ids[2:4]},
		{"after a cursor", ListOptions{Limit: 2, Before: ids[1]}, ids[2:4]},
		{"past the end", ListOptions{Offset: 10}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := page(tc.opts); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	if _, _, err := e.srv.List(context.Background(), ListOptions{Before: "serve-0-none"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a cursor of no job: %v", err)
	}
	if _, err := e.srv.Get(context.Background(), "serve-0-none"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of no job: %v", err)
	}
}

// TestNewRefusesMissingDeps names the missing dependency.
func TestNewRefusesMissingDeps(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name string
		edit func(*Deps)
		want string
	}{
		{"DB", func(d *Deps) { d.DB = nil }, "Deps.DB is required"},
		{"Registry", func(d *Deps) { d.Registry = nil }, "Deps.Registry is required"},
		{"Mirror", func(d *Deps) { d.Mirror = nil }, "Deps.Mirror is required"},
		{"Catalog", func(d *Deps) { d.Catalog = nil }, "Deps.Catalog is required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := e.deps
			tc.edit(&d)
			if _, err := New(d); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v; want %q", err, tc.want)
			}
		})
	}
}

// TestStartAfterClose refuses a job once the server is closing.
func TestStartAfterClose(t *testing.T) {
	e := newEnv(t)
	e.srv.Close()
	if _, err := e.srv.Start(context.Background(), Request{Repo: tinyRepo}); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close: %v", err)
	}
}

// hangingRegistry never answers: a job stays in its registry step until
// its process goes.
type hangingRegistry struct{}

func (hangingRegistry) Repo(ctx context.Context, _, _ string) (hf.Repo, error) {
	<-ctx.Done()
	return hf.Repo{}, ctx.Err()
}
func (hangingRegistry) Refs(ctx context.Context, _ string) (hf.Refs, error) {
	<-ctx.Done()
	return hf.Refs{}, ctx.Err()
}
func (hangingRegistry) DownloadURL(id, commit, path string) string { return "" }

// TestAPoisonJobIsNotResumedForEver: a job that was running when two
// processes in a row died (as a header that crashed the server once did at
// every start) is failed by the third, saying so, instead of resumed; a
// job stopped cleanly by a shutdown is resumed however often.
func TestAPoisonJobIsNotResumedForEver(t *testing.T) {
	e := newEnv(t)
	deps := e.deps
	deps.Registry = hangingRegistry{}
	// Each process is a Server on the same database; one that "dies" is
	// left as it is (its goroutines end with the test), so it never
	// records a clean stop.
	process := func() *Server {
		s, err := New(deps)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	first := process()
	j := MustStart(t, first, Request{Repo: tinyRepo})
	waitForStep(t, first, j.ID, StepRegistry)

	met := &countingMetrics{}
	deps.Metrics = met
	second := process() // the first died; the job is resumed once
	if err := second.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	if met.started.Load() != 1 {
		t.Errorf("the resumed job counted %d starts in the new process, want 1", met.started.Load())
	}
	waitForStep(t, second, j.ID, StepRegistry)
	if got, _ := second.Get(context.Background(), j.ID); got.State != Running {
		t.Fatalf("after one death the job is %s, want it resumed", got.State)
	}

	third := process() // the second died too
	if err := third.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, err := third.Get(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := "modelserve stopped twice while this job was in its registry step; it is not resumed again"
	if got.State != Failed || !strings.HasPrefix(got.Error, want) {
		t.Fatalf("after two deaths the job is %s: %q; want failed: %q…", got.State, got.Error, want)
	}
	if st, _ := got.Step(StepRegistry); st.State != Failed {
		t.Errorf("the registry step is %s, want failed", st.State)
	}

	// A clean stop does not count: shut down and resumed three times over,
	// another job carries on.
	k := MustStart(t, third, Request{Repo: tinyRepo})
	waitForStep(t, third, k.ID, StepRegistry)
	prev := third
	for range 3 {
		prev.Close()
		next := process()
		if err := next.Resume(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitForStep(t, next, k.ID, StepRegistry)
		prev = next
	}
	if got, _ := prev.Get(context.Background(), k.ID); got.State != Running {
		t.Errorf("a job stopped cleanly three times is %s: %q", got.State, got.Error)
	}
}

// waitForStep waits until job id of s is running step.
func waitForStep(t *testing.T, s *Server, id, step string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if j, err := s.Get(context.Background(), id); err == nil {
			if st, ok := j.Step(step); ok && st.State == Running {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("job %s never ran its %s step", id, step)
}

// countingMetrics counts what the jobs tell metrics.
type countingMetrics struct{ started, ended atomic.Int64 }

func (m *countingMetrics) JobStarted()                    { m.started.Add(1) }
func (m *countingMetrics) JobEnded(string)                { m.ended.Add(1) }
func (m *countingMetrics) StepDone(string, time.Duration) {}

// TestPauseStopsAtAStepBoundary: a job paused mid-download finishes the
// download, then stops before its next step, stored as running for the
// next process; no job starts meanwhile; and Continue carries it on to
// its end without fetching again or announcing the mirror step again.
func TestPauseStopsAtAStepBoundary(t *testing.T) {
	e := newEnv(t, withNodeMemory(64<<30))
	content := ggufgen.Bytes(ggufgen.Spec{})
	e.hub.AddRepo(tinyRepo, hubtest.RepoOptions{})
	e.hub.AddFile(tinyRepo, tinyFile, content)
	e.hub.Trickle(tinyRepo, tinyFile, int64(len(content))) // about a second

	j := MustStart(t, e.srv, Request{Repo: tinyRepo, Replicas: 1})
	waitFetching(t, e.srv, j.ID, 0.1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	e.srv.Pause(ctx)
	cancel()

	stored, _, err := load(context.Background(), e.db, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.State != Running || MustStep(t, stored, StepMirror).State != Done {
		t.Fatalf("after Pause the job is stored %s with steps %+v; want it running with its download done", stored.State, stored.Steps)
	}
	if st, ok := stored.Step(StepCheck); ok && st.State == Running {
		t.Errorf("the paused job began its check step: %+v", st)
	}
	if _, err := e.srv.Start(context.Background(), Request{Repo: tinyRepo}); !errors.Is(err, ErrClosed) {
		t.Errorf("a job started while paused: %v; want it refused", err)
	}

	events, stop := e.srv.Subscribe(j.ID)
	defer stop()
	<-events // the job as it stands
	if err := e.srv.Continue(context.Background()); err != nil {
		t.Fatal(err)
	}
	if end := MustEnd(t, e.srv, j.ID); end.State != Done {
		t.Fatalf("the continued job ended %s: %s", end.State, end.Error)
	}
	if served := e.hub.BytesServed(tinyRepo, tinyFile); served != int64(len(content)) {
		t.Errorf("the Hub served %d bytes of a %d-byte file: the download ran twice", served, len(content))
	}
	for len(events) > 0 {
		ev := <-events
		if st, _ := ev.Job.Step(StepMirror); st.State == Running {
			t.Errorf("the continued job announced its mirror step running again: %+v", st)
		}
	}
}

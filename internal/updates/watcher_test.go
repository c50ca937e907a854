package updates_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
	"modelserve/internal/operr"
	"modelserve/internal/testkit"
	"modelserve/internal/updates"
)

// The watcher's tests run the real Hub client against internal/hubtest
// over loopback, and keep updates in real SQLite.

type env struct {
	t       *testing.T
	hub     *hubtest.Server
	client  *hf.Client
	dbFile  string
	db      *sql.DB
	catalog *catalog.Store
	metrics *countMetrics
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, hub: hubtest.New(t), dbFile: filepath.Join(t.TempDir(), "modelserve.db"), metrics: &countMetrics{}}
	c, err := hf.NewClient(hf.Options{Endpoint: e.hub.URL(), MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	e.client = c
	e.open()
	return e
}

// open opens the database (again, after close: as a restart would).
func (e *env) open() {
	e.t.Helper()
	db := testkit.OpenDBFile(e.t, e.dbFile)
	e.db, e.catalog = db, catalog.NewStore(db)
}

// watcher builds a watcher on the env's parts; edit changes its Deps.
func (e *env) watcher(edit ...func(*updates.Deps)) *updates.Watcher {
	e.t.Helper()
	d := updates.Deps{DB: e.db, Catalog: e.catalog, Registry: e.client, Metrics: e.metrics, Interval: 6 * time.Hour}
	for _, f := range edit {
		f(&d)
	}
	w, err := updates.New(d)
	if err != nil {
		e.t.Fatal(err)
	}
	return w
}

// listCounting is the catalog counting its lists: the watcher's loop
// lists it once a pass, first thing.
type listCounting struct {
	updates.Catalog
	n atomic.Int64
}

func (c *listCounting) List(ctx context.Context) ([]catalog.Model, error) {
	c.n.Add(1)
	return c.Catalog.List(ctx)
}

// runPasses runs w's loop, built with count as its catalog (counted), for
// passes passes at least, each done whole, and until what a test waits
// for (until, when given) has happened in them; then it stops it: a test
// sees what the loop did or left alone in so many passes, not in so much
// time.
func runPasses(t *testing.T, w *updates.Watcher, count *listCounting, passes int, until ...func() (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	from := count.n.Load()
	go func() { defer close(done); w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	// The pass after the last one counted has begun: that one is over.
	testkit.WaitFor(t, 5*time.Second, fmt.Sprint(passes, " passes of the watcher's loop"), func() (bool, string) {
		n := count.n.Load() - from
		for _, u := range until {
			if ok, saw := u(); !ok {
				return false, fmt.Sprint(n, " begun; ", saw)
			}
		}
		return n > int64(passes), fmt.Sprint(n, " begun")
	})
}

// counted is an edit of a watcher's Deps that counts the passes of its
// loop in c.
func counted(c *listCounting) func(*updates.Deps) {
	return func(d *updates.Deps) { c.Catalog, d.Catalog = d.Catalog, c }
}

// repo puts a repository on the Hub with a GGUF file and a README, and
// returns the commit its main branch is at.
func (e *env) repo(id string, weights []byte) string {
	e.t.Helper()
	e.hub.AddRepo(id, hubtest.RepoOptions{})
	e.hub.AddFileSpec(id, hubtest.FileSpec{Path: "README.md", Content: []byte("# " + id), InGit: true})
	return e.hub.AddFile(id, "model-Q4_K_M.gguf", weights)
}

// serve puts name in the catalog as a job serving repo at rev would: its
// origin the GGUF file at the commit rev resolves to, with the ref as
// asked and what the registry's refs say it is.
func (e *env) serve(name, repo, rev string) catalog.Model {
	e.t.Helper()
	ctx := context.Background()
	r, err := e.client.Repo(ctx, repo, rev)
	if err != nil {
		e.t.Fatal(err)
	}
	refs, err := e.client.Refs(ctx, repo)
	if err != nil {
		e.t.Fatal(err)
	}
	o := &catalog.Origin{Repo: repo, Revision: r.Commit, Ref: rev, RefKind: refs.KindOf(rev)}
	for _, f := range r.Files {
		if strings.HasSuffix(f.Path, ".gguf") {
			o.Files = append(o.Files, catalog.OriginFile{Path: f.Path, Bytes: f.Size, SHA256: f.SHA256})
		}
	}
	m := catalog.Model{Name: name, ContextLength: 2048, Origin: o, Scaling: catalog.Scaling{Max: 1},
		Profiles: []catalog.Profile{{Name: "cpu", Engine: "llama.cpp"}}}
	if err := e.catalog.Add(ctx, m, "test"); err != nil {
		e.t.Fatal(err)
	}
	m, _ = e.catalog.Get(ctx, name)
	return m
}

// registryAsked is whether the Hub was asked anything about repo.
func (e *env) registryAsked(repo string) bool {
	for _, r := range e.hub.Log() {
		if strings.Contains(r.URL, "/"+repo+"/") || strings.HasSuffix(r.URL, "/"+repo) {
			return true
		}
	}
	return false
}

func mustCheck(t *testing.T, w *updates.Watcher, name string) updates.Result {
	t.Helper()
	r, err := w.Check(context.Background(), name)
	if err != nil {
		t.Fatalf("checking %s: %v", name, err)
	}
	return r
}

func mustStatus(t *testing.T, w *updates.Watcher, name string) updates.Status {
	t.Helper()
	st, err := w.Status(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// countMetrics counts what the watcher tells the metrics.
type countMetrics struct {
	mu      sync.Mutex
	checks  map[string]int
	noticed int
}

func (m *countMetrics) UpdateChecked(result string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.checks == nil {
		m.checks = map[string]int{}
	}
	m.checks[result]++
}

func (m *countMetrics) UpdateNoticed() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.noticed++
}

func (m *countMetrics) counts() (map[string]int, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for k, v := range m.checks {
		out[k] = v
	}
	return out, m.noticed
}

// TestNewWeightsOnTheBranchAreAnUpdate: a commit that changes the model's
// GGUF is an update naming the file with both sizes and sha256; the check
// before it found the model up to date.
func TestNewWeightsOnTheBranchAreAnUpdate(t *testing.T) {
	e := newEnv(t)
	old, fresh := []byte("weights, first upload"), []byte("weights, fixed and re-quantised")
	first := e.repo("acme/Tiny-GGUF", old)
	e.serve("tiny", "acme/Tiny-GGUF", "main")
	w := e.watcher()

	r := mustCheck(t, w, "tiny")
	if r.Result != updates.ResultUpToDate || r.Commit != first || r.Update != nil {
		t.Fatalf("before the branch moved: %+v, want up to date at %s", r, first)
	}

	second := e.hub.AddFile("acme/Tiny-GGUF", "model-Q4_K_M.gguf", fresh)
	r = mustCheck(t, w, "tiny")
	if r.Result != updates.ResultUpdateAvailable || r.Commit != second || !r.Recorded || r.Update == nil {
		t.Fatalf("after the branch moved: %+v, want an update to %s, recorded now", r, second)
	}
	u := r.Update
	want := updates.FileChange{Path: "model-Q4_K_M.gguf", OldBytes: int64(len(old)), OldSHA256: sum(old),
		NewBytes: int64(len(fresh)), NewSHA256: sum(fresh)}
	if u.Model != "tiny" || u.Repo != "acme/Tiny-GGUF" || u.Ref != "main" || u.OldCommit != first || u.NewCommit != second ||
		u.State != updates.StateAvailable || len(u.Files) != 1 || u.Files[0] != want || time.Since(u.NoticedAt) > time.Minute {
		t.Errorf("update %+v\nwant from %s to %s changing %+v", u, first, second, want)
	}

	st := mustStatus(t, w, "tiny")
	if !st.Watched || st.Available == nil || st.Available.ID != u.ID || st.LastCheck == nil ||
		st.LastCheck.Result != updates.ResultUpdateAvailable || st.LastCheck.UpdateID != u.ID {
		t.Errorf("status %+v, want the update %d available and the last check naming it", st, u.ID)
	}
	if st.Interval != "6h0m0s" || st.IntervalSet || !st.NextCheck.Equal(st.LastCheck.At.Add(6*time.Hour)) {
		t.Errorf("interval %s (own: %v), next check %s after a check at %s", st.Interval, st.IntervalSet, st.NextCheck, st.LastCheck.At)
	}
	checks, noticed := e.metrics.counts()
	if noticed != 1 || checks[updates.ResultUpToDate] != 1 || checks[updates.ResultUpdateAvailable] != 1 {
		t.Errorf("metrics: checks %v, noticed %d", checks, noticed)
	}

	// A file that is gone from the branch counts too.
	third := e.hub.DeleteFile("acme/Tiny-GGUF", "model-Q4_K_M.gguf")
	r = mustCheck(t, w, "tiny")
	if r.Update == nil || r.Update.NewCommit != third || len(r.Update.Files) != 1 || !r.Update.Files[0].Gone {
		t.Errorf("after the file was deleted: %+v", r.Update)
	}
}

// TestACommitThatTouchesNothingTheModelUsesIsNoUpdate: a README edit
// moves the branch, and the check says the model is up to date at the new
// commit.
func TestACommitThatTouchesNothingTheModelUsesIsNoUpdate(t *testing.T) {
	e := newEnv(t)
	e.repo("acme/Tiny-GGUF", []byte("weights"))
	e.serve("tiny", "acme/Tiny-GGUF", "main")
	w := e.watcher()

	readme := e.hub.AddFileSpec("acme/Tiny-GGUF", hubtest.FileSpec{Path: "README.md", Content: []byte("# better words"), InGit: true})
	other := e.hub.AddFile("acme/Tiny-GGUF", "model-Q8_0.gguf", []byte("another quantisation"))
	r := mustCheck(t, w, "tiny")
	if r.Result != updates.ResultUpToDate || r.Commit != other || r.Update != nil || r.Recorded {
		t.Errorf("after a README commit (%s) and another file (%s): %+v, want up to date at %s", readme, other, r, other)
	}
	if st := mustStatus(t, w, "tiny"); st.Available != nil || st.LastCheck == nil || st.LastCheck.Commit != other ||
		st.LastCheck.Result != updates.ResultUpToDate || time.Since(st.LastCheck.At) > time.Minute {
		t.Errorf("status %+v, want checked just now, up to date at %s", st, other)
	}
	if list, err := w.List(context.Background(), updates.ListOptions{}); err != nil || len(list) != 0 {
		t.Errorf("updates %+v (%v), want none", list, err)
	}
}

// TestAModelThatTookItsUpdateIsCheckedUpToDate: the check that found the
// new commit stands, once the model runs that commit, as a check saying it
// is up to date at it; the model's row said "not checked yet" after its
// promotion, though it had been checked minutes before.
func TestAModelThatTookItsUpdateIsCheckedUpToDate(t *testing.T) {
	e := newEnv(t)
	e.repo("acme/Tiny-GGUF", []byte("weights"))
	e.serve("tiny", "acme/Tiny-GGUF", "main")
	w := e.watcher()
	moved := e.hub.AddFile("acme/Tiny-GGUF", "model-Q4_K_M.gguf", []byte("better weights"))
	if r := mustCheck(t, w, "tiny"); r.Update == nil || r.Update.NewCommit != moved {
		t.Fatalf("the check: %+v, want the update to %s", r, moved)
	}
	// Promoted: the model's entry runs the new commit.
	e.serve("tiny", "acme/Tiny-GGUF", "main")
	st := mustStatus(t, w, "tiny")
	if st.Commit != moved || st.LastCheck == nil || st.LastCheck.Result != updates.ResultUpToDate || st.LastCheck.Commit != moved ||
		time.Since(st.LastCheck.At) > time.Minute || !st.NextCheck.Equal(st.LastCheck.At.Add(6*time.Hour)) {
		t.Errorf("status after the model took its update: %+v, last check %+v; want up to date at %s as of the check", st, st.LastCheck, moved)
	}
}

// TestTheSameMoveIsOneUpdate: the same new commit checked again, and
// again after the database is reopened by a new watcher, is the one update
// recorded first.
func TestTheSameMoveIsOneUpdate(t *testing.T) {
	e := newEnv(t)
	e.repo("acme/Tiny-GGUF", []byte("weights"))
	e.serve("tiny", "acme/Tiny-GGUF", "main")
	e.hub.AddFile("acme/Tiny-GGUF", "model-Q4_K_M.gguf", []byte("new weights"))

	w := e.watcher()
	first := mustCheck(t, w, "tiny")
	again := mustCheck(t, w, "tiny")
	if !first.Recorded || again.Recorded || again.Update == nil || again.Update.ID != first.Update.ID {
		t.Errorf("first %+v, again %+v: want one update, recorded by the first check", first, again)
	}

	e.db.Close()
	e.open()
	restarted := mustCheck(t, e.watcher(), "tiny")
	if restarted.Recorded || restarted.Update == nil || restarted.Update.ID != first.Update.ID {
		t.Errorf("after a restart: %+v, want update %d again, not recorded anew", restarted, first.Update.ID)
	}
	list, err := e.watcher().List(context.Background(), updates.ListOptions{})
	if err != nil || len(list) != 1 {
		t.Errorf("updates %+v (%v), want one", list, err)
	}
	if _, noticed := e.metrics.counts(); noticed != 1 {
		t.Errorf("%d updates counted as noticed, want 1", noticed)
	}
}

// TestPinnedModelsNeverAskTheRegistry: a model served at a commit or a
// tag, or one served before its branch was recorded, is refused a check in
// a sentence and never checked by the loop, and the registry hears nothing
// of it.
func TestPinnedModelsNeverAskTheRegistry(t *testing.T) {
	e := newEnv(t)
	commit := e.repo("acme/Tiny-GGUF", []byte("weights"))
	e.hub.SetRef("acme/Tiny-GGUF", "v1.0", commit)
	e.serve("at-commit", "acme/Tiny-GGUF", commit)
	e.serve("at-tag", "acme/Tiny-GGUF", "v1.0")
	old := e.serve("before-refs", "acme/Tiny-GGUF", "main")
	old.Origin.Ref, old.Origin.RefKind = "", ""
	if err := e.catalog.Add(context.Background(), old, "test"); err != nil {
		t.Fatal(err)
	}
	unsaid := e.serve("kind-unknown", "acme/Tiny-GGUF", "main")
	unsaid.Origin.RefKind = ""
	if err := e.catalog.Add(context.Background(), unsaid, "test"); err != nil {
		t.Fatal(err)
	}
	// The branch moves: were any of them checked, it would be news.
	e.hub.AddFile("acme/Tiny-GGUF", "model-Q4_K_M.gguf", []byte("new weights"))
	e.hub.ResetCounters()

	passes := &listCounting{}
	w := e.watcher(func(d *updates.Deps) { d.Interval, d.Tick = time.Millisecond, time.Millisecond }, counted(passes))
	runPasses(t, w, passes, 5)

	for name, want := range map[string]string{
		"at-commit":    "at-commit is pinned to the commit " + commit[:7] + " and is never updated",
		"at-tag":       "at-tag is pinned to the tag v1.0 and is never updated",
		"before-refs":  "served before modelserve recorded the branch it came from: to have it watched for new weights, serve ",
		"kind-unknown": "kind-unknown was served from main, and the registry would not say then whether that is a branch",
	} {
		_, err := w.Check(context.Background(), name)
		e, ok := operr.As(err)
		if !ok || e.Kind != operr.Conflict || !strings.Contains(e.Msg, want) {
			t.Errorf("checking %s: %v, want a conflict saying %q", name, err, want)
		}
		if st := mustStatus(t, w, name); st.Watched || !strings.Contains(st.NotWatched, want) || !st.NextCheck.IsZero() {
			t.Errorf("status of %s: %+v", name, st)
		}
	}
	if e.registryAsked("acme/Tiny-GGUF") {
		log := e.hub.Log()
		t.Errorf("the registry was asked %d times about pinned models, first %s", len(log), log[0].URL)
	}
}

// TestAFailingRegistryIsRecordedAndTheWatcherGoesOn: a 500 for one
// repository and a disabled other are each the last check's result, in a
// sentence; a third model, checked in the same pass, has its update
// noticed.
func TestAFailingRegistryIsRecordedAndTheWatcherGoesOn(t *testing.T) {
	e := newEnv(t)
	e.repo("acme/Broken-GGUF", []byte("weights"))
	e.repo("acme/Gone-GGUF", []byte("weights"))
	e.repo("acme/Fine-GGUF", []byte("weights"))
	e.serve("broken", "acme/Broken-GGUF", "main")
	e.serve("gone", "acme/Gone-GGUF", "main")
	e.serve("fine", "acme/Fine-GGUF", "main")
	moved := e.hub.AddFile("acme/Fine-GGUF", "model-Q4_K_M.gguf", []byte("new weights"))
	e.hub.FailNext("acme/Broken-GGUF", "", 500, 1000)
	e.hub.SetDisabled("acme/Gone-GGUF", true)

	w := e.watcher(func(d *updates.Deps) { d.Interval, d.Tick = 20*time.Millisecond, 5*time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	deadline := time.Now().Add(10 * time.Second)
	for {
		all := map[string]updates.Status{}
		for _, n := range []string{"broken", "gone", "fine"} {
			all[n] = mustStatus(t, w, n)
		}
		if all["broken"].LastCheck != nil && all["gone"].LastCheck != nil && all["fine"].LastCheck != nil {
			if c := all["broken"].LastCheck; c.Result != updates.ResultFailed || !strings.Contains(c.Error, "500 Internal Server Error for acme/Broken-GGUF") {
				t.Errorf("broken's last check %+v, want failed saying the registry answered 500", c)
			}
			if c := all["gone"].LastCheck; c.Result != updates.ResultFailed || !strings.Contains(c.Error, "acme/Gone-GGUF has been disabled") {
				t.Errorf("gone's last check %+v, want failed saying the repository is disabled", c)
			}
			if st := all["fine"]; st.LastCheck.Result != updates.ResultUpdateAvailable || st.Available == nil || st.Available.NewCommit != moved {
				t.Errorf("fine's status %+v, want the update to %s", st, moved)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not every model was checked: %+v", all)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Asked now, the failure is the operator's error with its kind.
	_, err := w.Check(context.Background(), "broken")
	if oe, ok := operr.As(err); !ok || oe.Kind != operr.Unavailable {
		t.Errorf("checking broken now: %v, want unavailable", err)
	}
}

// TestIntervalZeroMeansNoCheck: with no default interval, or a model's own
// of 0, the loop leaves the model alone; a model with an interval of its
// own is checked beside it.
func TestIntervalZeroMeansNoCheck(t *testing.T) {
	e := newEnv(t)
	e.repo("acme/Never-GGUF", []byte("weights"))
	e.repo("acme/Often-GGUF", []byte("weights"))
	e.serve("never", "acme/Never-GGUF", "main")
	e.serve("often", "acme/Often-GGUF", "main")

	passes := &listCounting{}
	run := func(w *updates.Watcher, until ...func() (bool, string)) { runPasses(t, w, passes, 5, until...) }

	t.Run("no default", func(t *testing.T) {
		e.hub.ResetCounters()
		run(e.watcher(func(d *updates.Deps) { d.Interval, d.Tick = 0, time.Millisecond }, counted(passes)))
		if n := len(e.hub.Log()); n != 0 {
			t.Errorf("the registry was asked %d times with the interval 0", n)
		}
	})
	t.Run("a model's own 0", func(t *testing.T) {
		w := e.watcher(func(d *updates.Deps) { d.Interval, d.Tick = 20*time.Millisecond, time.Millisecond }, counted(passes))
		never := time.Duration(0)
		st, err := w.SetSettings(context.Background(), "never", &never, "", true)
		if err != nil || st.Interval != "0s" || !st.IntervalSet || !st.NextCheck.IsZero() {
			t.Fatalf("set never's interval to 0: %+v %v", st, err)
		}
		e.hub.ResetCounters()
		// Until often, due every 20 ms, has been checked: never is left
		// alone in the same passes.
		run(w, func() (bool, string) { return e.registryAsked("acme/Often-GGUF"), "often not checked yet" })
		if e.registryAsked("acme/Never-GGUF") || !e.registryAsked("acme/Often-GGUF") {
			t.Errorf("asked of never: %v, of often: %v; want often only", e.registryAsked("acme/Never-GGUF"), e.registryAsked("acme/Often-GGUF"))
		}
		if st := mustStatus(t, w, "never"); st.LastCheck != nil {
			t.Errorf("never was checked: %+v", st.LastCheck)
		}
		// Back to the default, and asked for by name, it is checked.
		if st, err := w.SetSettings(context.Background(), "never", nil, "", true); err != nil || st.IntervalSet || st.Interval != "20ms" {
			t.Errorf("back to the default: %+v %v", st, err)
		}
		mustCheck(t, w, "never")
	})
}

func TestSetIntervalRefusals(t *testing.T) {
	e := newEnv(t)
	e.repo("acme/Tiny-GGUF", []byte("weights"))
	e.serve("tiny", "acme/Tiny-GGUF", "main")
	w := e.watcher()
	for _, d := range []time.Duration{time.Second, 400 * 24 * time.Hour} {
		if _, err := w.SetSettings(context.Background(), "tiny", &d, "", true); err == nil || !strings.Contains(err.Error(), "from 1m to 8760h") {
			t.Errorf("interval %s: %v", d, err)
		}
	}
	hour := time.Hour
	if _, err := w.SetSettings(context.Background(), "nothing", &hour, "", true); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("an unknown model: %v", err)
	}
	if _, err := w.Check(context.Background(), "nothing"); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("checking an unknown model: %v", err)
	}
	if _, err := w.SetSettings(context.Background(), "tiny", nil, "sometimes", true); err == nil || !strings.Contains(err.Error(), `not "sometimes"`) {
		t.Errorf("the policy sometimes: %v", err)
	}
}

// TestAutoPolicyTriesTheUpdateAtOnce: an update noticed for a model whose
// policy is auto is handed to the update jobs at once, once; a manual
// model's waits; a trial that cannot start leaves the update available.
func TestAutoPolicyTriesTheUpdateAtOnce(t *testing.T) {
	e := newEnv(t)
	for _, name := range []string{"eager", "patient"} {
		e.repo("acme/"+name, []byte("weights"))
		e.serve(name, "acme/"+name, "main")
		e.hub.AddFile("acme/"+name, "model-Q4_K_M.gguf", []byte("new weights"))
	}
	w := e.watcher()
	var tried []string
	w.OnAuto(func(_ context.Context, u updates.Update) error {
		tried = append(tried, u.Model)
		return errors.New("another update of it is on trial")
	})
	st, err := w.SetSettings(context.Background(), "eager", nil, updates.PolicyAuto, true)
	if err != nil || st.Policy != updates.PolicyAuto {
		t.Fatalf("SetSettings: %+v %v", st, err)
	}
	mustCheck(t, w, "eager")
	mustCheck(t, w, "patient")
	mustCheck(t, w, "eager") // the same update: not tried again
	if strings.Join(tried, " ") != "eager" {
		t.Errorf("tried %v, want eager's update alone, once", tried)
	}
	if st, _ := w.Status(context.Background(), "eager"); st.Available == nil || st.Available.State != updates.StateAvailable {
		t.Errorf("an update whose trial could not start is %+v, want still available", st.Available)
	}
	if st, _ := w.Status(context.Background(), "patient"); st.Policy != updates.PolicyManual {
		t.Errorf("patient's policy %q, want manual by default", st.Policy)
	}
}

func TestParseInterval(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"6h", 6 * time.Hour, ""},
		{"0", 0, ""},
		{"0s", 0, ""},
		{"90m", 90 * time.Minute, ""},
		{"10s", 0, "from 1m to 8760h"},
		{"-1h", 0, "a duration such as 6h"},
		{"weekly", 0, "a duration such as 6h"},
	} {
		d, err := updates.ParseInterval(tc.in)
		if tc.err == "" && (err != nil || d != tc.want) || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ParseInterval(%q) = %s, %v", tc.in, d, err)
		}
	}
}

// hangingRefs is a registry whose refs never come: the Hub client, but
// for a listing that waits until its request gives up.
type hangingRefs struct{ *hf.Client }

func (hangingRefs) Refs(ctx context.Context, id string) (hf.Refs, error) {
	<-ctx.Done()
	return hf.Refs{}, ctx.Err()
}

// TestACheckIsBoundedInTime: a registry that does not answer holds a check
// no longer than its bound, and the check's result says so.
func TestACheckIsBoundedInTime(t *testing.T) {
	e := newEnv(t)
	e.repo("acme/Tiny-GGUF", []byte("weights"))
	e.serve("tiny", "acme/Tiny-GGUF", "main")
	w := e.watcher(func(d *updates.Deps) { d.Registry, d.CheckTimeout = hangingRefs{e.client}, 50*time.Millisecond })

	start := time.Now()
	_, err := w.Check(context.Background(), "tiny")
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the check took %s with a bound of 50ms", took)
	}
	oe, ok := operr.As(err)
	if !ok || oe.Kind != operr.Unavailable || !strings.Contains(oe.Msg, "did not answer about acme/Tiny-GGUF within 50ms") {
		t.Fatalf("got %v, want unavailable saying the registry did not answer in time", err)
	}
	if st := mustStatus(t, w, "tiny"); st.LastCheck == nil || st.LastCheck.Result != updates.ResultFailed || st.LastCheck.Error != oe.Msg {
		t.Errorf("last check %+v, want the failure recorded", st.LastCheck)
	}
}

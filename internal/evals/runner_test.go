package evals_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/auth"
	"modelserve/internal/evals"
	"modelserve/internal/fleet"
	"modelserve/internal/gateway"
	"modelserve/internal/ggufgen"
	"modelserve/internal/llamatest"
	"modelserve/internal/operr"
	"modelserve/internal/testkit"
	"modelserve/internal/testlog"
)

// The runner's tests ask real llama.cpp engines through the real gateway
// and fleet, and keep suites and runs in real SQLite. The tiny models'
// answers mean nothing, but at temperature 0 with a seed they are always
// the same, so the suites here are written to have known outcomes
// whatever the answer: any non-space character matches \S, "Paris" it
// never says, and an embedding is nearest itself.

// env is the runner's world.
type env struct {
	t       *testing.T
	dbFile  string
	db      *sql.DB
	catalog *catalog.Store
	gw      *gateway.Gateway
	metrics *countMetrics
	logs    *testlog.Buffer
	log     *slog.Logger
}

// newEnv opens the database; engines start only once withEngines is asked.
func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, dbFile: filepath.Join(t.TempDir(), "modelserve.db"), metrics: &countMetrics{}, logs: &testlog.Buffer{}}
	e.log = slog.New(slog.NewTextHandler(e.logs, nil))
	e.db = e.open()
	e.catalog = catalog.NewStore(e.db)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", e.logs.String())
		}
	})
	return e
}

// open opens the database file again, as a restarted modelserve would.
func (e *env) open() *sql.DB {
	e.t.Helper()
	return testkit.OpenDBFile(e.t, e.dbFile)
}

// withEngines runs a fleet of real llama-server engines for the catalog,
// and the gateway in front of it.
func (e *env) withEngines() *env {
	t := e.t
	t.Helper()
	fl, err := fleet.New(fleet.Options{
		Catalog: e.catalog, Engine: llamatest.Path(t), Threads: 1, Log: e.log.With("part", "fleet"),
		Interval: 50 * time.Millisecond, Backoff: 20 * time.Millisecond, StopGrace: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fl.Run(ctx) }()
	gw, err := gateway.New(gateway.Options{Catalog: e.catalog, Fleet: fl, Tokens: auth.NewTokens(e.db), Log: e.log.With("part", "gateway")})
	if err != nil {
		t.Fatal(err)
	}
	e.gw = gw
	t.Cleanup(func() {
		gw.Close()
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("the fleet did not stop within 20s")
		}
	})
	return e
}

// runner is a runner on db asking through asker; edit changes its Deps.
func (e *env) runner(db *sql.DB, asker evals.Asker, edit ...func(*evals.Deps)) *evals.Runner {
	e.t.Helper()
	d := evals.Deps{DB: db, Catalog: catalog.NewStore(db), Asker: asker, Metrics: e.metrics, Log: e.log.With("part", "evals")}
	for _, f := range edit {
		f(&d)
	}
	r, err := evals.New(d)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(r.Close)
	return r
}

// add puts a tiny model in the catalog, served from commit: a chat model,
// or an embedding model.
func (e *env) add(name, commit string, embeddings bool) {
	e.t.Helper()
	// A tiny model's context is kept small: it loads faster.
	spec, prof := ggufgen.Spec{}, catalog.Profile{Name: "cpu", Engine: "llamacpp", Size: catalog.Size{Pool: 1024, Slots: 1}, RAMBytes: 1 << 30, Priority: 100}
	if embeddings {
		spec = ggufgen.Spec{Pooling: new(uint32(1)), EmbeddingLength: 96, HeadCount: 6, HeadCountKV: 3}
		prof.Slots, prof.Embeddings = 4, true
	}
	path := filepath.Join(e.t.TempDir(), name+".gguf")
	if err := ggufgen.WriteFile(path, spec); err != nil {
		e.t.Fatal(err)
	}
	m := catalog.Model{
		Name: name, Source: path, ContextLength: 1024,
		Profiles:     []catalog.Profile{prof},
		Scaling:      catalog.Scaling{Min: 1, Max: 1},
		Capabilities: catalog.Capabilities{Embeddings: embeddings},
		Origin:       &catalog.Origin{Repo: "acme/" + name, Revision: commit},
	}
	if err := e.catalog.Add(context.Background(), m, "test"); err != nil {
		e.t.Fatal(err)
	}
}

// countMetrics counts what the runner tells the metrics.
type countMetrics struct {
	mu          sync.Mutex
	runs        map[string]int
	pass, fails int
}

func (m *countMetrics) EvalRun(state string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.runs == nil {
		m.runs = map[string]int{}
	}
	m.runs[state]++
}

func (m *countMetrics) EvalCase(pass bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if pass {
		m.pass++
	} else {
		m.fails++
	}
}

func (m *countMetrics) counts() (done, failed, pass, fails int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runs[evals.StateDone], m.runs[evals.StateFailed], m.pass, m.fails
}

// chatSuite has outcomes known whatever a tiny model answers: the first
// passes, the other two fail.
const chatSuite = `{"cases": [
	{"name": "says something", "prompt": "Say hello.", "max_tokens": 16, "expect": {"regex": "\\S"}},
	{"name": "capital", "system": "Answer in one word.", "prompt": "What is the capital of France?", "max_tokens": 8, "expect": {"exact": "Paris"}},
	{"name": "order", "prompt": "Give the order as JSON.", "max_tokens": 24, "expect": {"json_schema": {"type": "object", "required": ["id"]}}}
]}`

const commitA = "c0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ff"

func mustSet(t *testing.T, r *evals.Runner, model, suite string) evals.Stored {
	t.Helper()
	st, err := r.SetSuite(context.Background(), model, []byte(suite), "ada")
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestRunJudgesATinyModelsAnswers(t *testing.T) {
	e := newEnv(t).withEngines()
	e.add("chatty", commitA, false)
	r := e.runner(e.db, e.gw)
	ctx := context.Background()
	st := mustSet(t, r, "chatty", chatSuite)
	if len(st.Suite.Cases) != 3 || st.UpdatedBy != "ada" || st.Digest == "" {
		t.Fatalf("the suite kept: %+v", st)
	}

	run, err := r.Run(ctx, "chatty", "chatty")
	if err != nil {
		t.Fatal(err)
	}
	if run.State != evals.StateDone || run.Passed != 1 || run.Total != 3 || run.Commit != commitA || run.Target != "chatty" || run.Suite != st.Digest {
		t.Fatalf("run: %+v; want done, 1 of 3 passed, at %s", run, commitA)
	}
	stored, err := r.Get(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.State != evals.StateDone || stored.Passed != 1 || stored.Total != 3 || stored.Finished.IsZero() || len(stored.Results) != 3 {
		t.Fatalf("the stored run: %+v", stored)
	}
	said, capital, order := stored.Results[0], stored.Results[1], stored.Results[2]
	if !said.Pass || said.Reason != "" || strings.TrimSpace(said.Answer) == "" || said.Kind != evals.KindRegex {
		t.Errorf("the \\S case: %+v; want a pass with the answer kept", said)
	}
	if capital.Pass || capital.Reason != `the answer is not "Paris": `+operr.Quote(strings.TrimSpace(capital.Answer)) {
		t.Errorf("the Paris case: %+v; want a failure quoting the answer", capital)
	}
	want := "the answer is not JSON: " + operr.Quote(order.Answer)
	if json.Valid([]byte(strings.TrimSpace(order.Answer))) {
		want = "the answer's JSON does not fit the schema"
	}
	if order.Pass || !strings.HasPrefix(order.Reason, want) {
		t.Errorf("the JSON case: %+v; want a failure saying %q", order, want)
	}
	for _, res := range stored.Results {
		if res.Latency < 0 || len([]rune(res.Answer)) > evals.MaxAnswer {
			t.Errorf("%s: latency %d ms, answer of %d characters", res.Case, res.Latency, len([]rune(res.Answer)))
		}
	}

	// The same suite run again gives the same answers and verdicts.
	again, err := r.Run(ctx, "chatty", "chatty")
	if err != nil {
		t.Fatal(err)
	}
	if again.ID == run.ID || again.Passed != run.Passed || len(again.Results) != len(run.Results) {
		t.Fatalf("the second run: %+v", again)
	}
	for i := range run.Results {
		a, b := run.Results[i], again.Results[i]
		if a.Answer != b.Answer || a.Pass != b.Pass || a.Reason != b.Reason {
			t.Errorf("case %s differs between runs: %q (%v) then %q (%v)", a.Case, a.Answer, a.Pass, b.Answer, b.Pass)
		}
	}
	if worse, why, err := evals.Compare(run, again); err != nil || worse || why != "chatty passed 1 of 3 cases of chatty's suite, as many as chatty" {
		t.Errorf("comparing the two runs: %v, %q, %v", worse, why, err)
	}
	runs, err := r.Runs(ctx, "chatty", 10)
	if err != nil || len(runs) != 2 || runs[0].ID != again.ID || runs[1].ID != run.ID || runs[0].Results != nil {
		t.Errorf("runs, newest first: %+v, %v", runs, err)
	}
	if done, failed, pass, fails := e.metrics.counts(); done != 2 || failed != 0 || pass != 2 || fails != 4 {
		t.Errorf("metrics: %d runs done, %d failed, %d cases passed, %d failed; want 2, 0, 2, 4", done, failed, pass, fails)
	}

	// Asked of a target whose engine cannot load its weights, every case
	// fails with the gateway's sentence, and the run itself is done.
	e.add("broken", "bad0bad0", false)
	m, _ := e.catalog.Get(ctx, "broken")
	if err := os.WriteFile(m.Source, []byte("not a GGUF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	wrong, err := r.Run(ctx, "chatty", "broken")
	if err != nil {
		t.Fatal(err)
	}
	if wrong.State != evals.StateDone || wrong.Passed != 0 || wrong.Commit != "bad0bad0" || len(wrong.Results) != 3 {
		t.Fatalf("the run against a model that cannot load: %+v", wrong)
	}
	t.Logf("against a model that cannot load: %s", wrong.Results[0].Reason)
	for _, res := range wrong.Results {
		if res.Pass || !strings.HasPrefix(res.Reason, "the request failed: the gateway answered ") {
			t.Errorf("%s against a model that cannot load: %+v; want the gateway's refusal", res.Case, res)
		}
	}
}

func TestSimilarityOfATinyEmbeddingModel(t *testing.T) {
	e := newEnv(t).withEngines()
	e.add("embedder", commitA, true)
	r := e.runner(e.db, e.gw)
	mustSet(t, r, "embedder", `{"cases": [
		{"name": "itself", "expect": {"similarity": {"anchor": "a cat sat on the mat", "closer": "a cat sat on the mat", "farther": "quarterly invoice totals"}}},
		{"name": "itself, farther", "expect": {"similarity": {"anchor": "a cat sat on the mat", "closer": "quarterly invoice totals", "farther": "a cat sat on the mat"}}}
	]}`)
	run, err := r.Run(context.Background(), "embedder", "embedder")
	if err != nil {
		t.Fatal(err)
	}
	if run.State != evals.StateDone || run.Passed != 1 || len(run.Results) != 2 {
		t.Fatalf("run: %+v", run)
	}
	if res := run.Results[0]; !res.Pass || !strings.HasPrefix(res.Answer, "cosine(anchor, closer) 1.0000") {
		t.Errorf("an anchor the same as the closer text: %+v", res)
	}
	if res := run.Results[1]; res.Pass || !strings.HasPrefix(res.Reason, "the anchor is not nearer the closer text") {
		t.Errorf("an anchor the same as the farther text: %+v", res)
	}
}

func TestSuiteRefusals(t *testing.T) {
	e := newEnv(t)
	e.add("chatty", commitA, false)
	e.add("embedder", commitA, true)
	r := e.runner(e.db, &heldAsker{})
	ctx := context.Background()
	before := mustSet(t, r, "chatty", chatSuite)

	for _, tc := range []struct {
		name, model, suite string
		kind               operr.Kind
		want               string
	}{
		{"unknown model", "nobody", chatSuite, operr.NotFound, `the catalog has no model named "nobody"`},
		{"invalid suite", "chatty", `{"cases": [{"name": "x", "prompt": "p", "expect": {"regex": "("}}]}`, operr.Invalid, `case 1 ("x"): expect.regex`},
		{"similarity for a chat model", "chatty", `{"cases": [{"name": "s", "expect": {"similarity": {"anchor": "a", "closer": "a", "farther": "b"}}}]}`,
			operr.Invalid, `case 1 ("s") is a similarity case, and chatty does not serve embeddings`},
		{"chat for an embedding model", "embedder", chatSuite, operr.Invalid, `case 1 ("says something") asks for a chat answer, and embedder serves embeddings alone`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.SetSuite(ctx, tc.model, []byte(tc.suite), "ada")
			if e, ok := operr.As(err); !ok || e.Kind != tc.kind || !strings.Contains(e.Msg, tc.want) {
				t.Fatalf("SetSuite = %v; want %s saying %q", err, tc.kind, tc.want)
			}
		})
	}
	after, err := r.Suite(ctx, "chatty")
	if err != nil || after.Digest != before.Digest || !after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Errorf("after the refusals chatty's suite is %+v (%v); want it unchanged", after, err)
	}

	// No suite: nothing to run, and no run recorded.
	_, err = r.Run(ctx, "embedder", "embedder")
	if e, ok := operr.As(err); !ok || e.Kind != operr.Conflict || !errors.Is(err, evals.ErrNoSuite) || !strings.Contains(e.Msg, "embedder has no eval suite") {
		t.Errorf("running a model without a suite: %v", err)
	}
	if _, err := r.Run(ctx, "chatty", "nobody"); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("running against a target the catalog does not have: %v", err)
	}
	if runs, _ := r.Runs(ctx, "embedder", 10); len(runs) != 0 {
		t.Errorf("refused runs were recorded: %+v", runs)
	}

	// An empty suite removes it.
	st := mustSet(t, r, "chatty", `{"cases": []}`)
	if len(st.Suite.Cases) != 0 || !st.UpdatedAt.IsZero() {
		t.Errorf("after an empty suite: %+v", st)
	}
	if _, err := r.Run(ctx, "chatty", "chatty"); !errors.Is(err, evals.ErrNoSuite) {
		t.Errorf("running a removed suite: %v", err)
	}
	if _, err := r.Get(ctx, 99); !errors.Is(err, evals.ErrNotFound) {
		t.Errorf("an unknown run: %v", err)
	}
}

// heldAsker answers each request as next says, after waiting for a
// release when hold is set; asked is told of each request as it arrives.
type heldAsker struct {
	mu    sync.Mutex
	hold  chan struct{}
	asked chan string
	next  func(route string, body []byte) ([]byte, error)
}

func (h *heldAsker) Ask(ctx context.Context, route string, body []byte) ([]byte, error) {
	h.mu.Lock()
	hold, asked, next := h.hold, h.asked, h.next
	h.mu.Unlock()
	if asked != nil {
		asked <- route
	}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if next != nil {
		return next(route, body)
	}
	return []byte(`{"choices": [{"message": {"role": "assistant", "content": "Lyon"}}]}`), nil
}

// TestRunInterruptedByARestartEndsFailed: modelserve dies with a run under
// way; the next start fails the run, saying how far it got, and the run
// the dead process held does not overwrite that.
func TestRunInterruptedByARestartEndsFailed(t *testing.T) {
	e := newEnv(t)
	e.add("chatty", commitA, false)
	asker := &heldAsker{hold: make(chan struct{}), asked: make(chan string, 10)}
	first := e.runner(e.db, asker)
	mustSet(t, first, "chatty", chatSuite)
	ctx := context.Background()
	run, err := first.Start(ctx, "chatty", "chatty")
	if err != nil {
		t.Fatal(err)
	}
	if run.State != evals.StateRunning || run.ID == 0 {
		t.Fatalf("a run just started: %+v", run)
	}
	<-asker.asked
	// A second run against the same target waits its turn.
	if _, err := first.Start(ctx, "chatty", "chatty"); !strings.Contains(errText(err), "is asking chatty now") {
		t.Errorf("a second run against a busy target: %v", err)
	}

	// The restart: another process opens the database and fails what was
	// left running.
	second := e.runner(e.open(), asker)
	n, err := second.FailInterrupted(ctx)
	if err != nil || n != 1 {
		t.Fatalf("FailInterrupted = %d, %v; want the one run", n, err)
	}
	got, err := second.Get(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	const why = "modelserve stopped while the run was running, after 0 of 3 cases: run it again"
	if got.State != evals.StateFailed || got.Error != why || got.Finished.IsZero() {
		t.Fatalf("the interrupted run: %+v; want failed saying %q", got, why)
	}

	// The old process, had it lived on, ends its run without undoing that.
	close(asker.hold)
	first.Close()
	if got, _ := second.Get(ctx, run.ID); got.State != evals.StateFailed || got.Error != why || got.Passed != 0 || len(got.Results) != 0 {
		t.Errorf("after the old process ended it, the run is %+v", got)
	}
}

// TestStoppingEndsARunFailed: a run in the background is failed when
// modelserve stops (Close), and a run whose caller gives up is failed
// too; neither claims the cases it did not ask.
func TestStoppingEndsARunFailed(t *testing.T) {
	e := newEnv(t)
	e.add("chatty", commitA, false)
	ctx := context.Background()

	asker := &heldAsker{hold: make(chan struct{}), asked: make(chan string, 10)}
	r := e.runner(e.db, asker)
	mustSet(t, r, "chatty", chatSuite)
	run, err := r.Start(ctx, "chatty", "chatty")
	if err != nil {
		t.Fatal(err)
	}
	<-asker.asked
	r.Close()
	got, _ := r.Get(ctx, run.ID)
	if got.State != evals.StateFailed || got.Error != "modelserve stopped while the run was running, after 0 of 3 cases: run it again" || len(got.Results) != 0 {
		t.Errorf("a run stopped by Close: %+v", got)
	}
	if _, err := r.Start(ctx, "chatty", "chatty"); !strings.Contains(errText(err), "modelserve is stopping") {
		t.Errorf("a run started after Close: %v", err)
	}

	// The caller cancels after the first case has its answer.
	asker = &heldAsker{asked: make(chan string, 10)}
	r = e.runner(e.db, asker)
	cctx, cancel := context.WithCancel(ctx)
	asker.next = func(string, []byte) ([]byte, error) {
		cancel()
		return []byte(`{"choices": [{"message": {"content": "Lyon"}}]}`), nil
	}
	run, err = r.Run(cctx, "chatty", "chatty")
	if err != nil {
		t.Fatal(err)
	}
	if run.State != evals.StateFailed || run.Error != "the run was stopped after 1 of 3 cases" || len(run.Results) != 1 {
		t.Errorf("a run whose caller gave up: %+v", run)
	}
}

// TestBounds: a case not answered within its bound fails saying so, and
// the run goes on; once the run's bound has passed, the cases left fail
// unasked, and the run is done.
func TestBounds(t *testing.T) {
	e := newEnv(t)
	e.add("chatty", commitA, false)
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		each, all time.Duration
		want      []string
	}{
		{"a case's bound", 50 * time.Millisecond, time.Minute, []string{
			"no answer within 50ms, the bound of one case",
			"no answer within 50ms, the bound of one case",
			"no answer within 50ms, the bound of one case",
		}},
		{"the run's bound", time.Minute, 100 * time.Millisecond, []string{
			"no answer before the run reached its bound of 100ms",
			"not asked: the run had reached its bound of 100ms",
			"not asked: the run had reached its bound of 100ms",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.runner(e.db, &heldAsker{hold: make(chan struct{})}, func(d *evals.Deps) { d.CaseTimeout, d.RunTimeout = tc.each, tc.all })
			mustSet(t, r, "chatty", chatSuite)
			run, err := r.Run(ctx, "chatty", "chatty")
			if err != nil {
				t.Fatal(err)
			}
			if run.State != evals.StateDone || run.Passed != 0 || len(run.Results) != 3 {
				t.Fatalf("run: %+v", run)
			}
			for i, want := range tc.want {
				if res := run.Results[i]; res.Pass || res.Reason != want {
					t.Errorf("case %d: %+v; want it failed saying %q", i+1, res, want)
				}
			}
		})
	}

	// An answer that is no chat completion fails the case, quoting it.
	asker := &heldAsker{next: func(string, []byte) ([]byte, error) { return []byte(`{"object": "list"}`), nil }}
	run, err := e.runner(e.db, asker).Run(ctx, "chatty", "chatty")
	if err != nil {
		t.Fatal(err)
	}
	if res := run.Results[0]; res.Pass || res.Reason != `the answer is not a chat completion: "{\"object\": \"list\"}"` {
		t.Errorf("an answer that is no completion: %+v", res)
	}
}

func TestNewRefusesMissingDeps(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name string
		d    evals.Deps
	}{
		{"DB", evals.Deps{Catalog: e.catalog, Asker: &heldAsker{}}},
		{"Catalog", evals.Deps{DB: e.db, Asker: &heldAsker{}}},
		{"Asker", evals.Deps{DB: e.db, Catalog: e.catalog}},
	} {
		if _, err := evals.New(tc.d); err == nil || !strings.Contains(err.Error(), "Deps."+tc.name+" is required") {
			t.Errorf("without %s: %v", tc.name, err)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// largestSuite is a suite near the bounds: a hundred JSON Schema cases,
// near 1 MiB once kept, whose patterns together take the whole bound of
// the suite's regular expressions.
func largestSuite() string {
	words := make([]string, 100)
	for i := range words {
		words[i] = fmt.Sprintf("%q", strings.Repeat(string(rune('a'+i%26)), 60))
	}
	enum := strings.Join(words, ", ")
	cases := make([]string, evals.MaxCases)
	for i := range cases {
		cases[i] = fmt.Sprintf(`{"name": "c%d", "prompt": "Give the order as JSON.", "max_tokens": 64, "expect": {"json_schema": `+
			`{"type": "object", "properties": {"id": {"type": "string", "pattern": "^c%d-[a-z]{0,95}$"}, "note": {"enum": [%s]}}}}}`, i, i, enum)
	}
	return `{"cases": [` + strings.Join(cases, ",\n") + `]}`
}

// A suite is compiled once, when it is put, and kept compiled: neither a
// read nor a run compiles it again. After a start, reads still compile
// nothing (six at once read the kept suite once), and the first run
// compiles it once for all. A read of the largest suite takes under 50 ms:
// the fastest of five, one after the other, since the machine running the
// tests may be busy with much else (a read that compiled took 0.2 to
// 0.4 s); that the first read after a start compiles nothing is the
// count's to say.
func TestSuiteCompiledOnce(t *testing.T) {
	e := newEnv(t)
	e.add("chatty", commitA, false)
	asker := &heldAsker{}
	r := e.runner(e.db, asker)
	ctx := context.Background()
	suite := largestSuite()
	put := mustSet(t, r, "chatty", suite)
	if n := evals.Compilations(r); n != 1 {
		t.Fatalf("putting the suite compiled it %d times; want once", n)
	}

	read := func(r *evals.Runner, what string) time.Duration {
		t.Helper()
		start := time.Now()
		st, err := r.Suite(ctx, "chatty")
		took := time.Since(start)
		if err != nil || st.Digest != put.Digest || len(st.Suite.Cases) != evals.MaxCases || !st.UpdatedAt.Equal(put.UpdatedAt) ||
			!bytes.Equal(st.SuiteJSON(), put.SuiteJSON()) {
			t.Errorf("%s: a read: %v, digest %s, %d cases; want the suite as put (%s)", what, err, st.Digest, len(st.Suite.Cases), put.Digest)
		}
		return took
	}
	// reads reads the suite five times, one after the other, then six
	// times at once.
	reads := func(r *evals.Runner, what string) {
		t.Helper()
		took := make([]time.Duration, 5)
		for i := range took {
			took[i] = read(r, what)
		}
		t.Logf("%s: five reads of a suite of %d bytes took %v", what, len(suite), took)
		if slices.Min(took) > 50*time.Millisecond && !evals.RaceEnabled {
			t.Errorf("%s: a read took %s at the fastest of five; want under 50ms", what, slices.Min(took))
		}
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() { read(r, what) })
		}
		wg.Wait()
	}
	reads(r, "after the put")
	for range 2 {
		if _, err := r.Run(ctx, "chatty", "chatty"); err != nil {
			t.Fatal(err)
		}
	}
	if n := evals.Compilations(r); n != 1 {
		t.Errorf("eleven reads and two runs after the put: %d compilations; want the put's alone", n)
	}

	// A start: the kept suite is read, not compiled, to be shown; the
	// first run compiles it, and the second uses that.
	r = e.runner(e.open(), asker)
	reads(r, "after a start")
	if n := evals.Compilations(r); n != 0 {
		t.Errorf("reads after a start compiled the suite %d times", n)
	}
	for range 2 {
		if _, err := r.Run(ctx, "chatty", "chatty"); err != nil {
			t.Fatal(err)
		}
	}
	if n := evals.Compilations(r); n != 1 {
		t.Errorf("two runs after a start: %d compilations; want one", n)
	}
}

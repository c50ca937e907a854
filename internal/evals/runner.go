package evals

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"modelserve/catalog"
	"modelserve/internal/chat"
	"modelserve/internal/operr"
)

// Catalog is what the runner reads of the catalog (catalog.Store): the
// model whose suite it is, and the target's commit.
type Catalog interface {
	Get(ctx context.Context, name string) (catalog.Model, error)
}

// Asker sends a request to a served model as a client's goes, by catalog
// name (gateway.Gateway): route is "/v1/chat/completions" or
// "/v1/embeddings", body the request; an answer other than a 200 is an
// operator's error carrying the gateway's or the engine's sentence.
type Asker interface {
	Ask(ctx context.Context, route string, body []byte) ([]byte, error)
}

// Metrics is told of each run's end and each case's verdict
// (internal/metrics).
type Metrics interface {
	EvalRun(state string)
	EvalCase(pass bool)
}

// Deps are what a Runner needs. DB, Catalog and Asker are required.
type Deps struct {
	// DB holds suites, runs and results (migrations/0013_evals.sql).
	DB      *sql.DB
	Catalog Catalog
	Asker   Asker
	// Metrics, when set, is told of runs and cases.
	Metrics Metrics
	Log     *slog.Logger
	// RunTimeout bounds a whole run: 15 minutes unless set. A case not
	// answered by then fails, saying so.
	RunTimeout time.Duration
	// CaseTimeout bounds one case's request: 2 minutes unless set, as
	// long as the gateway lets a request wait for a replica to load.
	CaseTimeout time.Duration
}

// Seed is every chat case's sampling seed; with temperature 0 the same
// weights give the same answer to the same case, so two runs differ only
// where the weights do.
const Seed = 42

// ErrNoSuite is a model with no suite to run.
var ErrNoSuite = errors.New("no eval suite")

// Runner keeps suites and runs them. Its methods are safe for concurrent
// use.
type Runner struct {
	deps   Deps
	store  store
	suites *suites

	// active are the runs under way, by target: one run at a time asks a
	// target, so two runs' requests do not slow each other's latencies.
	mu     sync.Mutex
	active map[string]*active
	closed bool
	// handingOver is set while modelserve hands its port to a new process
	// (HandOver): a run stopped then says so.
	handingOver bool
	wg          sync.WaitGroup
	// judging counts the checks of answers against schemas, which may
	// outlive the case that gave up waiting for one (Case.validate).
	judging sync.WaitGroup
}

// active is a run under way: its id, how to stop it, and whether it runs
// in the background (Start), where no caller's context ends it.
type active struct {
	id         int64
	stop       context.CancelCauseFunc
	background bool
	done       chan struct{}
}

// New checks the dependencies and builds a Runner.
func New(d Deps) (*Runner, error) {
	for name, missing := range map[string]bool{"DB": d.DB == nil, "Catalog": d.Catalog == nil, "Asker": d.Asker == nil} {
		if missing {
			return nil, errors.New("evals: Deps." + name + " is required")
		}
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.RunTimeout <= 0 {
		d.RunTimeout = 15 * time.Minute
	}
	if d.CaseTimeout <= 0 {
		d.CaseTimeout = 2 * time.Minute
	}
	return &Runner{deps: d, store: store{d.DB}, suites: newSuites(), active: map[string]*active{}}, nil
}

// FailInterrupted ends every run a modelserve that stopped left running:
// failed, saying how far it got. Call it once at start, before runs begin.
func (r *Runner) FailInterrupted(ctx context.Context) (int64, error) {
	n, err := r.store.failRunning(ctx, time.Now())
	if err != nil {
		return 0, err
	}
	if n > 0 {
		r.deps.Log.Warn("eval runs left running by the last stop were failed", "runs", n)
	}
	return n, nil
}

// Close stops the runs under way (each ends failed, saying modelserve
// stopped) and waits for them; nothing starts after it.
func (r *Runner) Close() {
	r.mu.Lock()
	r.closed = true
	for _, a := range r.active {
		if a.stop != nil {
			a.stop(errStopping)
		}
	}
	r.mu.Unlock()
	r.wg.Wait()
	r.judging.Wait()
}

// HandOver is modelserve handing its port to a new process, which fails
// every run left running at its start: the runs in the background are
// stopped here first, each ending failed and saying a handover interrupted
// it after how many cases, and HandOver returns once they have; none
// starts in the background until Continue. A run with
// a caller (Run: an update's trial) is left to its caller, whose context
// ends as the caller's job stops for the handover; it says the same then.
// Neither is carried on in the new process: its results so far are kept,
// and it is run again there (a trial's eval step runs it again by itself).
// Continue ends it, when the new process did not take over.
func (r *Runner) HandOver() {
	r.mu.Lock()
	r.handingOver = true
	var stopped []chan struct{}
	for _, a := range r.active {
		if a.background && a.stop != nil {
			a.stop(errHandedOver)
			stopped = append(stopped, a.done)
		}
	}
	r.mu.Unlock()
	for _, done := range stopped {
		<-done
	}
}

// Continue is HandOver undone: the new process did not take over, and a
// run stopped from now on says so no more.
func (r *Runner) Continue() {
	r.mu.Lock()
	r.handingOver = false
	r.mu.Unlock()
}

// Suite is the suite of the model named name, with no cases when it has
// none. It is read to be shown, not compiled.
func (r *Runner) Suite(ctx context.Context, name string) (Stored, error) {
	if _, err := r.deps.Catalog.Get(ctx, name); err != nil {
		return Stored{}, err
	}
	kept, ok, err := r.store.suite(ctx, name)
	if err != nil {
		return Stored{}, err
	}
	if !ok {
		r.suites.forget(name)
		return noSuite(name), nil
	}
	return r.suites.shown(name, kept)
}

// noSuite is the suite of a model that has none.
func noSuite(model string) Stored { return Stored{Model: model, Suite: Suite{Cases: []Case{}}} }

// SetSuite replaces the suite of the model named name with the one data
// holds (a suite of no cases removes it), after checking it whole: a
// refusal is a sentence naming the case and the field, and changes
// nothing. by is who set it.
func (r *Runner) SetSuite(ctx context.Context, name string, data []byte, by string) (Stored, error) {
	m, err := r.deps.Catalog.Get(ctx, name)
	if err != nil {
		return Stored{}, err
	}
	suite, err := r.suites.parse(ctx, data, false)
	if err != nil {
		return Stored{}, err
	}
	if err := fits(m, suite); err != nil {
		return Stored{}, err
	}
	kept, err := r.store.setSuite(ctx, name, suite, time.Now(), by)
	if err != nil {
		return Stored{}, err
	}
	if len(suite.Cases) == 0 {
		r.suites.forget(name)
		return noSuite(name), nil
	}
	// Kept compiled: neither a read nor a run compiles it again.
	return r.suites.put(name, kept, suite), nil
}

// fits refuses a case m cannot answer: an embedding model answers
// similarity cases alone, a chat model all but those.
func fits(m catalog.Model, s Suite) error {
	for i, c := range s.Cases {
		switch sim := c.Kind() == KindSimilarity; {
		case sim && !m.Capabilities.Embeddings:
			return invalid("%s is a similarity case, and %s does not serve embeddings: give it a regex, json_schema or exact expectation",
				label(i+1, c.Name), m.Name)
		case !sim && m.Capabilities.Embeddings:
			return invalid("%s asks for a chat answer, and %s serves embeddings alone: give it a similarity expectation",
				label(i+1, c.Name), m.Name)
		}
	}
	return nil
}

// Runs are the newest runs of the model named model, newest first, at
// most limit, without their results.
func (r *Runner) Runs(ctx context.Context, model string, limit int) ([]Run, error) {
	return r.store.runs(ctx, model, max(limit, 1))
}

// Get is run id with its results; an unknown id is an error matching
// ErrNotFound.
func (r *Runner) Get(ctx context.Context, id int64) (Run, error) {
	return r.store.run(ctx, id)
}

// Run runs model's suite against target (a catalog name: the model
// itself, or a version of it served beside it) and returns the run when
// it has ended. A model unknown, without a suite (ErrNoSuite), or whose
// target is already being run against, is refused with a sentence and no
// run is recorded; once a run is recorded it ends done or failed, and is
// returned either way. Cancelling ctx stops the run (failed).
func (r *Runner) Run(ctx context.Context, model, target string) (Run, error) {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	run, suite, err := r.begin(ctx, model, target, stop, false)
	if err != nil {
		return Run{}, err
	}
	return r.execute(ctx, run, suite), nil
}

// Start is Run in the background: it returns the run as it starts, and it
// carries on until it ends or Close stops it. ctx is only the start's.
func (r *Runner) Start(ctx context.Context, model, target string) (Run, error) {
	rctx, stop := context.WithCancelCause(context.Background())
	run, suite, err := r.begin(ctx, model, target, stop, true)
	if err != nil {
		stop(nil)
		return Run{}, err
	}
	go func() {
		defer stop(nil)
		r.execute(rctx, run, suite)
	}()
	return run, nil
}

// begin checks what a run needs, reserves target and records the run as
// running. stop stops the run (Close calls it, and HandOver for a run in
// the background).
func (r *Runner) begin(ctx context.Context, model, target string, stop context.CancelCauseFunc, background bool) (Run, Suite, error) {
	if _, err := r.deps.Catalog.Get(ctx, model); err != nil {
		return Run{}, Suite{}, err
	}
	kept, ok, err := r.store.suite(ctx, model)
	if err != nil {
		return Run{}, Suite{}, err
	}
	if !ok {
		r.suites.forget(model)
		return Run{}, Suite{}, operr.Wrap(operr.Conflict, ErrNoSuite,
			"%s has no eval suite to run: give it one with PUT /api/v1/catalog/%s/evals, or on its evals page", model, model)
	}
	st, suite, err := r.suites.compiled(model, kept)
	if err != nil {
		return Run{}, Suite{}, err
	}
	t, err := r.deps.Catalog.Get(ctx, target)
	if err != nil {
		return Run{}, Suite{}, err
	}
	run := Run{Model: model, Target: target, Suite: st.Digest, Total: len(st.Suite.Cases), Started: time.Now()}
	if t.Origin != nil {
		run.Commit = t.Origin.Revision
	}

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return Run{}, Suite{}, operr.New(operr.Unavailable, "modelserve is stopping: run the suite of %s again once it has started", model)
	}
	if background && r.handingOver {
		r.mu.Unlock()
		return Run{}, Suite{}, operr.New(operr.Unavailable, "modelserve is handing its port to a new process: run the suite of %s again in a moment, and the new process runs it", model)
	}
	if a, busy := r.active[target]; busy {
		r.mu.Unlock()
		if a.id == 0 {
			// Its row is being written: it has no id to give yet.
			return Run{}, Suite{}, operr.New(operr.Conflict, "an eval run is starting to ask %s now: wait for it to end", target)
		}
		return Run{}, Suite{}, operr.New(operr.Conflict, "eval run %d is asking %s now: wait for it to end (GET /api/v1/evals/runs/%d)", a.id, target, a.id)
	}
	a := &active{stop: stop, background: background, done: make(chan struct{})}
	r.active[target] = a
	r.wg.Add(1)
	r.mu.Unlock()

	if run, err = r.store.begin(ctx, run); err != nil {
		r.release(target)
		return Run{}, Suite{}, err
	}
	r.mu.Lock()
	a.id = run.ID
	r.mu.Unlock()
	r.deps.Log.Info("eval run started", "run", run.ID, "model", model, "target", target, "commit", run.Commit, "cases", run.Total)
	return run, suite, nil
}

// release lets another run ask target.
func (r *Runner) release(target string) {
	r.mu.Lock()
	if a := r.active[target]; a != nil {
		close(a.done)
	}
	delete(r.active, target)
	r.mu.Unlock()
	r.wg.Done()
}

// Why a run's or a case's context ended.
var (
	errStopping   = errors.New("modelserve is stopping")
	errHandedOver = errors.New("modelserve handed its port to a new process")
	errRunBound   = errors.New("the run reached its time bound")
	errCaseBound  = errors.New("the case reached its time bound")
)

// execute asks run's cases one at a time, records each verdict as it
// comes, and ends the run.
func (r *Runner) execute(ctx context.Context, run Run, suite Suite) Run {
	defer r.release(run.Target)
	ctx, cancel := context.WithTimeoutCause(ctx, r.deps.RunTimeout, errRunBound)
	defer cancel()
	// What has been asked is recorded even when the run is being stopped.
	keep := context.WithoutCancel(ctx)
	run.State, run.Results = StateDone, []Result{}
	for i, c := range suite.Cases {
		res, stopped := r.ask(ctx, run.Target, c)
		if stopped {
			run.State = StateFailed
			r.mu.Lock()
			handingOver := r.handingOver
			r.mu.Unlock()
			if cause := context.Cause(ctx); errors.Is(cause, errHandedOver) || (handingOver && !errors.Is(cause, errStopping)) {
				run.Error = fmt.Sprintf("modelserve handed its port to a new process while the run was running, after %d of %d cases: "+
					"the new process does not carry it on; run it again there (an update's trial runs it again by itself)", i, run.Total)
			} else if errors.Is(cause, errStopping) {
				run.Error = fmt.Sprintf("modelserve stopped while the run was running, after %d of %d cases: run it again", i, run.Total)
			} else {
				run.Error = fmt.Sprintf("the run was stopped after %d of %d cases", i, run.Total)
			}
			break
		}
		if err := r.store.result(keep, run.ID, i, res); errors.Is(err, errNotRunning) {
			// Failed under it by a start of modelserve on the same
			// database: what that start said stands.
			r.deps.Log.Warn("eval run: ended by another start of modelserve while this one ran it", "run", run.ID)
			run.State, run.Error = StateFailed, "the run was ended by another start of modelserve"
			break
		} else if err != nil {
			r.deps.Log.Error("eval run: keeping a result", "run", run.ID, "case", c.Name, "err", err)
			run.State, run.Error = StateFailed, fmt.Sprintf("the result of %s could not be kept, after %d of %d cases; the server's log says why", label(i+1, c.Name), i, run.Total)
			break
		}
		if r.deps.Metrics != nil {
			r.deps.Metrics.EvalCase(res.Pass)
		}
		run.Results = append(run.Results, res)
		if res.Pass {
			run.Passed++
		}
	}
	run.Finished = time.Now()
	if err := r.store.finish(keep, run.ID, run.State, run.Error, run.Finished); err != nil {
		r.deps.Log.Error("eval run: ending it", "run", run.ID, "err", err)
	}
	if r.deps.Metrics != nil {
		r.deps.Metrics.EvalRun(run.State)
	}
	r.deps.Log.Info("eval run ended", "run", run.ID, "model", run.Model, "target", run.Target, "state", run.State,
		"passed", run.Passed, "total", run.Total, "error", run.Error, "took", run.Finished.Sub(run.Started).Round(time.Millisecond))
	return run
}

// ask asks one case and judges the answer. stopped is true when the run
// was stopped (not bounded) before the case had an answer: no verdict.
func (r *Runner) ask(ctx context.Context, target string, c Case) (res Result, stopped bool) {
	res = Result{Case: c.Name, Kind: c.Kind()}
	if cause := context.Cause(ctx); cause != nil {
		if errors.Is(cause, errRunBound) {
			res.Reason = fmt.Sprintf("not asked: the run had reached its bound of %s", r.deps.RunTimeout)
			return res, false
		}
		return res, true
	}
	cctx, cancel := context.WithTimeoutCause(ctx, r.deps.CaseTimeout, errCaseBound)
	defer cancel()
	start := time.Now()
	var (
		answer, reason string
		pass           bool
		err            error
	)
	if res.Kind == KindSimilarity {
		answer, pass, reason, err = r.similarity(cctx, target, c)
	} else {
		answer, pass, reason, err = r.chat(cctx, target, c)
	}
	res.Latency = time.Since(start).Milliseconds()
	if err != nil {
		pass = false
		switch cause := context.Cause(cctx); {
		case errors.Is(cause, errCaseBound):
			reason = fmt.Sprintf("no answer within %s, the bound of one case", r.deps.CaseTimeout)
		case errors.Is(cause, errRunBound):
			reason = fmt.Sprintf("no answer before the run reached its bound of %s", r.deps.RunTimeout)
		case cause != nil:
			return res, true
		default:
			reason = r.failure(target, c, err)
		}
	}
	res.Answer, res.Pass, res.Reason = clipText(answer, MaxAnswer), pass, reason
	return res, false
}

// failure is a request's error as a case's reason: the gateway's or the
// engine's sentence, or a generic one when the error is not the
// operator's (logged with its cause).
func (r *Runner) failure(target string, c Case, err error) string {
	if msg, ok := operr.Sentence(err); ok {
		return "the request failed: " + msg
	}
	r.deps.Log.Error("eval case: the request failed", "target", target, "case", c.Name, "err", err)
	return "the request failed; the server's log says why"
}

// chat asks a chat case and judges the answer.
func (r *Runner) chat(ctx context.Context, target string, c Case) (answer string, pass bool, reason string, err error) {
	if c.unjudged != "" {
		// Its answer could not be judged: the model is not asked.
		return "", false, "not asked: " + c.unjudged, nil
	}
	// Deterministic and not streamed: a case's answer is the model's,
	// the same on every run.
	var msgs []chat.Message
	if c.System != "" {
		msgs = append(msgs, chat.System(c.System))
	}
	msgs = append(msgs, chat.User(c.Prompt))
	b, err := r.deps.Asker.Ask(ctx, chat.CompletionsPath, chat.Deterministic(target, c.Tokens(), Seed, msgs...).Body())
	if err != nil {
		return "", false, "", err
	}
	out, ok := chat.ReadCompletion(b)
	if !ok {
		return string(b), false, "the answer is not a chat completion: " + operr.Quote(string(b)), nil
	}
	answer = out.Text()
	pass, reason = c.judge(ctx, answer, &r.judging)
	return answer, pass, reason, nil
}

// similarity asks for the embeddings of a similarity case's three texts
// in one request, and judges them.
func (r *Runner) similarity(ctx context.Context, target string, c Case) (answer string, pass bool, reason string, err error) {
	s := c.Expect.Similarity
	b, err := r.deps.Asker.Ask(ctx, chat.EmbeddingsPath, chat.Embed(target, s.Anchor, s.Closer, s.Farther).Body())
	if err != nil {
		return "", false, "", err
	}
	var out chat.Embeddings
	if err := json.Unmarshal(b, &out); err != nil || len(out.Data) != 3 {
		return clipText(string(b), MaxAnswer), false, "the answer is not three embeddings: " + operr.Quote(string(b)), nil
	}
	vecs := make([][]float64, 3)
	for _, d := range out.Data {
		if d.Index < 0 || d.Index > 2 || vecs[d.Index] != nil {
			return clipText(string(b), MaxAnswer), false, "the answer's embeddings are not numbered 0, 1 and 2", nil
		}
		vecs[d.Index] = d.Embedding
	}
	answer, pass, reason = judgeSimilarity(vecs)
	return answer, pass, reason, nil
}

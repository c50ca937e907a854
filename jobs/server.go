// Package jobs takes a model from a registry repository to a replica that
// answers requests, as one job of seven steps: registry, plan, mirror,
// check, catalog, placement and smoke test.
//
// Serving a model by hand was many steps, each failing in its own way: find
// the file that suits the hardware, download it, check it arrived intact,
// work out how much memory it needs at a given context, write the catalog
// entry, start the engine with the right flags, and find out whether it
// loads. A job runs them in one place, saves each step to SQLite as it goes
// and publishes it to whoever watches, explains a failure in a sentence the
// operator can act on, and carries on from its step when the process starts
// again — a half-fetched file from where it stopped.
package jobs

import (
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"modelserve/internal/canary"
	"modelserve/internal/hf"
	"modelserve/internal/mirror"
	"modelserve/internal/notify"
	"modelserve/internal/operr"
	"runtime/debug"
	"slices"
	"sync"
	"time"
)

// Server starts, lists, resumes and cancels jobs. Its methods are safe for
// concurrent use.
type Server struct {
	deps   Deps
	events hub

	mu sync.Mutex
	// live are the jobs running in this process, and those that ended
	// with their end not yet in the database (a full disk): memory has
	// the truth about both, and Get, List and Subscribe read it there.
	live    map[string]*live
	closed  bool
	resumed bool
	// paused is a server handing its jobs to the next process (Pause):
	// each stops at its next step boundary, and none starts.
	paused bool
	// saving is whether a keepSaving goroutine runs; stop ends it.
	saving bool
	stop   chan struct{}
	wg     sync.WaitGroup
}

// live is a job running in this process.
type live struct {
	mu  sync.Mutex
	job Job
	seq int64
	// decisions carries an operator's verdict to an update's trial.
	decisions chan decision
	// lastProgress is when the mirror's progress was last saved and
	// published: at most a few times a second, however often it comes.
	lastProgress time.Time
	// began is when each step started running, for Metrics.
	began map[string]time.Time
	// root is the span of this run of the job, and steps the spans of
	// its steps still running (trace.go).
	root  trace.Span
	steps map[string]trace.Span

	cancel context.CancelCauseFunc
	done   chan struct{}

	// unsaved is a job a change of which the database did not take (a
	// full disk): the next save writes it whole. Guarded by mu.
	unsaved bool
	// finished is a job whose goroutine has returned, kept in Server.live
	// only until its end is saved. Guarded by Server.mu.
	finished bool
}

// Causes a job's context ends with: the operator cancelled it, or the
// process is stopping and the job is to carry on when it starts again.
var (
	errCancelled = errors.New("cancelled")
	errShutdown  = errors.New("shutting down")
)

// progressEvery is the least time between two saved progress updates of a
// job: the console sees a download move, and the database is not written
// for every chunk.
const progressEvery = 250 * time.Millisecond

// A job whose end the database would not take is saved again after
// firstSaveRetry, then at twice the wait each time, up to maxSaveRetry:
// soon after the operator frees space, without a write a second for a disk
// that stays full for hours.
const (
	firstSaveRetry = time.Second
	maxSaveRetry   = 30 * time.Second
)

// New checks the dependencies and builds a Server. Call Resume once to carry
// on the jobs a previous process left running, and Close on the way out.
func New(d Deps) (*Server, error) {
	switch {
	case d.DB == nil:
		return nil, errors.New("jobs: Deps.DB is required: the jobs and their steps are kept in it")
	case d.Registry == nil:
		return nil, errors.New("jobs: Deps.Registry is required: a job reads the repository from it")
	case d.Mirror == nil:
		return nil, errors.New("jobs: Deps.Mirror is required: a job fetches the files into it")
	case d.Catalog == nil:
		return nil, errors.New("jobs: Deps.Catalog is required: a job adds the model to it")
	}
	if d.Poll <= 0 {
		d.Poll = 200 * time.Millisecond
	}
	if d.ReadyTimeout <= 0 {
		d.ReadyTimeout = 30 * time.Minute
	}
	if d.SmokeTimeout <= 0 {
		d.SmokeTimeout = 5 * time.Minute
	}
	if d.UnplacedGrace <= 0 {
		d.UnplacedGrace = time.Minute
	}
	if d.MirrorNoProgress <= 0 {
		d.MirrorNoProgress = 10 * time.Minute
	}
	if d.MirrorWithin <= 0 {
		d.MirrorWithin = 6 * time.Hour
	}
	if d.Fleet != nil && d.Gateway == nil {
		return nil, errors.New("jobs with a fleet need the gateway, which the smoke test asks through: set Deps.Gateway")
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Policy == (canary.Policy{}) {
		d.Policy = canary.DefaultPolicy
	}
	if d.Share == 0 {
		d.Share = DefaultShare
	}
	return &Server{deps: d, live: map[string]*live{}, stop: make(chan struct{})}, nil
}

// Start checks the request and begins a job, returning it at once; the job
// runs on its own. A refused request (errors.Is ErrInvalid) starts nothing
// and stores nothing.
func (s *Server) Start(ctx context.Context, req Request) (Job, error) {
	if req.CanaryOf != "" || req.UpdateID != 0 || req.Share != 0 || req.RestoreOf != 0 || req.InPlace {
		return Job{}, invalid("canary_of, update_id, share, restore_of and in_place are an update's or a restore's, not a serve request's: POST /api/v1/catalog/{name}/update serves a model's update beside it")
	}
	return s.start(ctx, req, "")
}

func (s *Server) start(ctx context.Context, req Request, retryOf string) (Job, error) {
	req, err := normalize(req)
	if err != nil {
		return Job{}, err
	}
	s.mu.Lock()
	closed, paused := s.closed, s.paused
	s.mu.Unlock()
	if closed {
		return Job{}, operr.Wrap(operr.Unavailable, ErrClosed, "modelserve is shutting down: start the job again once it is back")
	}
	if paused {
		return Job{}, operr.Wrap(operr.Unavailable, ErrClosed, "modelserve is handing over to a new process: start the job again in a few seconds")
	}
	now := time.Now().UTC()
	kind := KindServe
	switch {
	case req.RestoreOf != 0:
		kind = KindRestore
	case req.CanaryOf != "":
		kind = KindUpdate
	}
	// The model it serves is named from the start, so a job that fails
	// before its plan still says which model it was for.
	l := &live{job: Job{ID: newID(kind, now), Kind: kind, Request: req, State: Running, Model: or(req.Name, hf.ModelName(req.Repo)),
		Steps: []Step{}, Started: now, RetryOf: retryOf}, seq: 1}
	// Saved before it runs, so that no step can be reported of a job the
	// database does not have.
	if err := save(ctx, s.deps.DB, l.job, l.seq, -1); err != nil {
		return Job{}, diskFull(err, "the job could not be recorded")
	}
	// This process runs it now: should it die doing so, the next start
	// knows (see Resume).
	if _, err := startUnclean(ctx, s.deps.DB, l.job.ID); err != nil {
		return Job{}, diskFull(err, "the job could not be recorded")
	}
	if s.deps.Metrics != nil {
		s.deps.Metrics.JobStarted()
	}
	j := l.job.clone()
	// Published before it runs, so that watchers of every job see it begin
	// before any of its steps.
	s.events.publish(Event{Seq: l.seq, Job: j.clone()})
	// Should the server have closed since, the job is saved as running,
	// and the next start carries it on.
	s.launch(l, s.run)
	return j, nil
}

// launch runs the job in a goroutine of its own, with a context of its own
// that Cancel and Close end: run, then finish, which every ending of a job
// passes through. It returns false when the server has closed, or another
// goroutine runs the job.
func (s *Server) launch(l *live, run func(context.Context, *live) error) bool {
	ctx, cancel := context.WithCancelCause(context.Background())
	l.cancel, l.done, l.decisions = cancel, make(chan struct{}), make(chan decision, 1)
	s.mu.Lock()
	if s.closed || s.live[l.job.ID] != nil {
		s.mu.Unlock()
		cancel(errShutdown)
		return false
	}
	s.live[l.job.ID] = l
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer close(l.done)
		defer s.forget(l)
		defer cancel(nil)
		ctx := s.startTrace(ctx, l)
		defer s.endTrace(l)
		s.finish(ctx, l, s.guard(ctx, l, run))
	}()
	return true
}

// forget lets go of a job whose goroutine has returned. One whose last
// change the database did not take stays, so that the API and the console
// show how it ended rather than the database's "running"; keepSaving
// writes it once there is room, and then lets go of it.
func (s *Server) forget(l *live) {
	l.mu.Lock()
	unsaved := l.unsaved
	l.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live[l.job.ID] != l {
		return
	}
	if !unsaved {
		delete(s.live, l.job.ID)
		return
	}
	l.finished = true
	s.keepSavingLocked()
}

// keepSavingLocked starts keepSaving unless it runs, or the server has
// closed (Close saves once more itself); s.mu is held.
func (s *Server) keepSavingLocked() {
	if s.saving || s.closed {
		return
	}
	s.saving = true
	s.wg.Add(1)
	go s.keepSaving()
}

// keepSaving writes the ended jobs the database did not take, waiting
// longer between tries each time, until none is left or Close.
func (s *Server) keepSaving() {
	defer s.wg.Done()
	wait := firstSaveRetry
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return // Close saves once more, after every job has stopped
		case <-t.C:
		}
		if !s.saveUnsaved() {
			return
		}
		wait = min(wait*2, maxSaveRetry)
		t.Reset(wait)
	}
}

// saveUnsaved writes each ended job the database lacks whole, and lets go
// of those it took. It says whether any is left; when none is, the
// keepSaving that called it is done (s.saving is cleared under the same
// lock that saw none left, so a job ending meanwhile starts another).
func (s *Server) saveUnsaved() bool {
	s.mu.Lock()
	var todo []*live
	for _, l := range s.live {
		if l.finished {
			todo = append(todo, l)
		}
	}
	s.mu.Unlock()
	var saved []*live
	for _, l := range todo {
		l.mu.Lock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := saveWhole(ctx, s.deps.DB, l.job, l.seq)
		cancel()
		if err == nil {
			l.unsaved = false
			saved = append(saved, l)
			s.deps.Log.Info("a job's end, which the database had not taken, is saved now", "job", l.job.ID, "state", l.job.State)
		}
		l.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range saved {
		if s.live[l.job.ID] == l {
			delete(s.live, l.job.ID)
		}
	}
	left := len(todo) > len(saved)
	if !left {
		for _, l := range s.live {
			left = left || l.finished
		}
	}
	if !left {
		s.saving = false
	}
	return left
}

// errPanicked is a job whose run panicked (guard).
var errPanicked = errors.New("the job stopped on a panic")

// guard runs run, keeping a panic in a step from taking the process down
// or leaving the job running forever: it is logged with its stack, and
// the job fails (finish) with a generic sentence.
func (s *Server) guard(ctx context.Context, l *live, run func(context.Context, *live) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.deps.Log.Error("a job stopped on a panic", "job", l.job.ID, "panic", r, "stack", string(debug.Stack()))
			err = errPanicked
		}
	}()
	return run(ctx, l)
}

// finish ends the job as run's result says, and then takes back what a
// job that did not serve its model had added (undo). Every ending of a job
// passes through here, once its steps have stopped: done, failed, a panic,
// a cancel, the poison-job guard; all but a stop of the server, after
// which the job carries on.
func (s *Server) finish(ctx context.Context, l *live, err error) {
	if err == nil {
		s.end(l, Done, "", "")
		return
	}
	if errors.Is(err, errPanicked) {
		s.fail(l, "", Failed, "the job stopped on an internal error; the server's log has the details")
		return
	}
	if ctx.Err() != nil || !l.running() {
		if context.Cause(ctx) == errShutdown {
			// Left running in the database: the next start carries on,
			// and this stop, being clean, does not count against it.
			s.deps.Log.Info("job stopped with the server; it carries on at the next start", "job", l.job.ID)
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := stoppedCleanly(sctx, s.deps.DB, l.job.ID); err != nil {
				s.deps.Log.Warn("could not record that a job stopped cleanly", "job", l.job.ID, "err", err)
			}
			cancel()
			return
		}
		// Cancelled: Cancel has recorded it already, and what the job
		// added goes now.
		s.undo(l, "", "")
		return
	}
	step := ""
	var se *stepError
	if errors.As(err, &se) {
		step, err = se.step, se.err
	}
	msg, shown := operr.Sentence(diskFull(err, fmt.Sprintf("the %s step could not write to its database", step)))
	if !shown {
		s.deps.Log.ErrorContext(ctx, "a job step failed", "job", l.job.ID, "step", step, "err", err)
		msg = fmt.Sprintf("the %s step failed on an unexpected error; the server's log has the details (job %s)", step, l.job.ID)
	} else {
		s.deps.Log.WarnContext(ctx, "serving a model failed", "job", l.job.ID, "repo", l.job.Request.Repo, "step", step, "err", msg)
	}
	stepState := Failed
	var rb *rolledBack
	if errors.As(err, &rb) {
		stepState = RolledBack
	}
	s.fail(l, step, stepState, msg)
}

// fail ends a running job failed at step with msg, once what it added is
// taken back: whoever sees it failed finds nothing of it in the catalog.
// The step is marked stepState: Failed, or RolledBack for a trial's
// verdict.
func (s *Server) fail(l *live, step, stepState, msg string) {
	s.undo(l, Failed, msg)
	s.endAs(l, Failed, step, stepState, msg)
	s.deps.Notify.Send(notify.JobFailed(l.job.ID, l.job.Model, l.job.Request.Repo, step, msg))
}

// end gives a running job its final state. With failed steps, the step named
// (or the one running, when step is "") is marked failed with msg.
func (s *Server) end(l *live, state, step, msg string) bool {
	return s.endAs(l, state, step, Failed, msg)
}

// endAs is end with the step marked stepState.
func (s *Server) endAs(l *live, state, step, stepState, msg string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.job.State != Running {
		return false
	}
	now := time.Now().UTC()
	changed := -1
	if state != Done {
		i := slices.IndexFunc(l.job.Steps, func(st Step) bool {
			return st.Name == step || (step == "" && st.State == Running)
		})
		if i < 0 && step != "" {
			l.job.Steps = append(l.job.Steps, Step{Name: step})
			i = len(l.job.Steps) - 1
		}
		if i >= 0 {
			st := &l.job.Steps[i]
			st.State, st.At = stepState, now
			if state == Cancelled {
				st.Detail = "cancelled"
			} else {
				st.Detail = msg
			}
			changed = i
			s.traceStepLocked(l, i)
		}
	}
	l.job.State, l.job.Error, l.job.Finished = state, msg, now
	s.publishLocked(l, changed)
	if s.deps.Metrics != nil {
		s.deps.Metrics.JobEnded(state)
	}
	if state == Done {
		s.deps.Log.Info("model served", "job", l.job.ID, "repo", l.job.Request.Repo, "model", l.job.Model)
	}
	return true
}

// publishLocked saves the job (and the step changed, if any) and tells its
// watchers; l.mu is held, so one job's changes are saved and sent in order.
// A job whose save fails (a full disk) runs on: its watchers still see it,
// the next change saves it whole, and one that ends unsaved is kept in
// memory and saved again until the database takes it (forget).
func (s *Server) publishLocked(l *live, step int) {
	l.seq++
	snap := l.job.clone()
	// Not the job's context: a job cancelled or failing must still be
	// recorded.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	if l.unsaved {
		err = saveWhole(ctx, s.deps.DB, snap, l.seq)
	} else {
		err = save(ctx, s.deps.DB, snap, l.seq, step)
	}
	switch {
	case err != nil && !l.unsaved:
		// Once, not at every progress report of a job on a full disk.
		s.deps.Log.Error("saving a job; it is kept in memory and saved again later", "job", snap.ID, "err", err)
		l.unsaved = true
	case err == nil && l.unsaved:
		s.deps.Log.Info("a job the database had not taken is saved again", "job", snap.ID)
		l.unsaved = false
	}
	s.events.publish(Event{Seq: l.seq, Job: snap})
}

// step starts a step or changes what it says. A step of a resumed job that
// was done before the restart is not announced as running again.
func (s *Server) step(l *live, name, state, detail string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.job.State != Running {
		return
	}
	now := time.Now().UTC()
	i := slices.IndexFunc(l.job.Steps, func(st Step) bool { return st.Name == name })
	if i < 0 {
		l.job.Steps = append(l.job.Steps, Step{Name: name})
		i = len(l.job.Steps) - 1
	}
	st := &l.job.Steps[i]
	if st.State == Done && state == Running {
		return
	}
	if st.State == state && st.Detail == detail {
		return
	}
	if state == Running && st.State != Running {
		if l.began == nil {
			l.began = map[string]time.Time{}
		}
		l.began[name] = now
	}
	if state == Done && st.State != Done && s.deps.Metrics != nil {
		if t, ok := l.began[name]; ok {
			s.deps.Metrics.StepDone(name, now.Sub(t))
		}
	}
	st.State, st.Detail, st.At = state, detail, now
	s.traceStepLocked(l, i)
	s.publishLocked(l, i)
}

// progress says how far the mirror has come, at most every progressEvery
// (and always once it has all the bytes).
func (s *Server) progress(l *live, done, total int64, connections int) {
	if total <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	i := slices.IndexFunc(l.job.Steps, func(st Step) bool { return st.Name == StepMirror })
	if l.job.State != Running || i < 0 || l.job.Steps[i].State != Running {
		return
	}
	now := time.Now()
	if now.Sub(l.lastProgress) < progressEvery && done < total {
		return
	}
	l.lastProgress = now
	st := &l.job.Steps[i]
	st.BytesDone, st.BytesTotal, st.Connections, st.At = done, total, connections, now.UTC()
	st.Detail = "fetching: " + mirror.Fetched(done, total, connections)
	s.publishLocked(l, i)
}

// set changes the job's own fields (model, commit, reply) and publishes it.
func (s *Server) set(l *live, edit func(j *Job)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.job.State != Running {
		return
	}
	edit(&l.job)
	s.publishLocked(l, -1)
}

// mark changes what the job records of itself, even once it has ended: a
// step that finishes after a cancel still tells finish what it added.
func (s *Server) mark(l *live, edit func(j *Job)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	edit(&l.job)
	s.publishLocked(l, -1)
}

// running is whether the job has not ended yet.
func (l *live) running() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.job.State == Running
}

// snapshot is the job as it stands, and its change number.
func (l *live) snapshot() (Job, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.job.clone(), l.seq
}

func (s *Server) liveJob(id string) *live {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live[id]
}

// Get returns a job as it stands, or an error matching ErrNotFound.
func (s *Server) Get(ctx context.Context, id string) (Job, error) {
	if l := s.liveJob(id); l != nil {
		j, _ := l.snapshot()
		return j, nil
	}
	j, _, err := load(ctx, s.deps.DB, id)
	return j, err
}

// List pages through the jobs, newest first, and says how many there are in
// all.
func (s *Server) List(ctx context.Context, o ListOptions) ([]Job, int, error) {
	list, total, err := listJobs(ctx, s.deps.DB, o)
	if err != nil {
		return nil, 0, err
	}
	// A running job's progress is saved a few times a second; what is in
	// memory is newer still.
	for i := range list {
		if l := s.liveJob(list[i].ID); l != nil {
			list[i], _ = l.snapshot()
		}
	}
	return list, total, nil
}

// Cancel stops a running job: its fetch is aborted, nothing more is written
// to the catalog, and it ends cancelled. It returns once the job has
// stopped. A job that has ended is refused (errors.Is ErrConflict).
func (s *Server) Cancel(ctx context.Context, id string) (Job, error) {
	l := s.liveJob(id)
	if l == nil {
		j, err := s.Get(ctx, id)
		if err != nil {
			return Job{}, err
		}
		if j.State == Running {
			// Running in the database but not here: left by a process
			// that stopped, and not resumed (yet, or ever).
			return s.cancelStored(ctx, j)
		}
		return j, operr.Wrap(operr.Conflict, ErrConflict, "job %s has already ended (%s): there is nothing to cancel", id, j.State)
	}
	if !s.end(l, Cancelled, "", "cancelled before it finished") {
		j, _ := l.snapshot()
		return j, operr.Wrap(operr.Conflict, ErrConflict, "job %s has already ended (%s): there is nothing to cancel", id, j.State)
	}
	l.cancel(errCancelled)
	select {
	case <-l.done:
	case <-ctx.Done():
	}
	j, _ := l.snapshot()
	s.deps.Log.Info("job cancelled", "job", id)
	return j, nil
}

// cancelStored cancels a job no goroutine of this process runs: ended
// through a goroutine of its own that runs no step, so that what it had
// added is taken back as any job's is (finish).
func (s *Server) cancelStored(ctx context.Context, j Job) (Job, error) {
	_, seq, err := load(ctx, s.deps.DB, j.ID)
	if err != nil {
		return Job{}, err
	}
	l := &live{job: j, seq: seq}
	cancelled := func(context.Context, *live) error {
		s.end(l, Cancelled, "", "cancelled before it finished")
		return errCancelled
	}
	if !s.launch(l, cancelled) {
		if s.liveJob(j.ID) != nil {
			// Resumed meanwhile: cancelled as a running job is.
			return s.Cancel(ctx, j.ID)
		}
		return Job{}, operr.Wrap(operr.Unavailable, ErrClosed, "modelserve is shutting down: cancel job %s once it is back", j.ID)
	}
	select {
	case <-l.done:
	case <-ctx.Done():
	}
	out, _ := l.snapshot()
	s.deps.Log.Info("job cancelled", "job", j.ID)
	return out, nil
}

// Retry runs a failed or cancelled job again, as a new job with the same
// request; what the mirror already holds of it is not fetched again.
func (s *Server) Retry(ctx context.Context, id string) (Job, error) {
	j, err := s.Get(ctx, id)
	if err != nil {
		return Job{}, err
	}
	if j.State != Failed && j.State != Cancelled {
		return Job{}, operr.Wrap(operr.Conflict, ErrConflict, "job %s is %s: only a failed or cancelled job is retried", id, j.State)
	}
	if st, ok := j.RolledBack(); ok {
		return Job{}, operr.Wrap(operr.Conflict, ErrConflict, "job %s's trial was rolled back by its %s step, and the same version "+
			"would be judged the same: check %s for a newer update", id, st.Name, j.Request.CanaryOf)
	}
	if j.Refused() {
		return Job{}, operr.Wrap(operr.Conflict, ErrConflict, "job %s was refused as it asked, and would be refused the same way again: "+
			"serve it again with what its sentence says to change", id)
	}
	return s.start(ctx, j.Request, j.ID)
}

// Resume carries on the jobs the database has as running: those a previous
// process was running when it stopped. Each goes on from the step it was in,
// reading the repository at the commit it had pinned. Call it once, at start.
func (s *Server) Resume(ctx context.Context) error {
	s.mu.Lock()
	if s.resumed {
		s.mu.Unlock()
		return errors.New("jobs: Resume was called twice; the jobs it found are running already")
	}
	s.resumed = true
	s.mu.Unlock()
	return s.resume(ctx)
}

// resume launches the jobs the database has as running and this process
// does not run.
func (s *Server) resume(ctx context.Context) error {
	ids, err := runningIDs(ctx, s.deps.DB)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if s.liveJob(id) != nil {
			continue
		}
		j, seq, err := load(ctx, s.deps.DB, id)
		if err != nil {
			return err
		}
		// A job that was running when a process died is resumed; one
		// that was running when two processes in a row died is what
		// killed them, most likely, and is failed rather than resumed a
		// third time (a crafted header once crashed every start).
		before, err := startUnclean(ctx, s.deps.DB, id)
		if err != nil {
			return err
		}
		l := &live{job: j, seq: seq}
		if before >= maxUncleanStarts {
			step := runningStep(j)
			s.deps.Log.Error("a job stopped the server twice; it is failed, not resumed", "job", id, "step", step)
			poisoned := func(context.Context, *live) error {
				return failedAt(step, sentencef("modelserve stopped twice while this job was in its %s step; it is not resumed again: "+
					"retry it once the cause is fixed, or look at the server's log", step))
			}
			// Failed through finish, which takes back what it had added
			// (an update's canary among it); waited for, so that the job
			// has ended when Resume returns.
			if !s.launch(l, poisoned) {
				return nil
			}
			<-l.done
			continue
		}
		s.deps.Log.Info("resuming a job", "job", id, "repo", j.Request.Repo, "commit", j.Commit)
		if s.deps.Metrics != nil {
			// Counted as started in this process, which counts it ended:
			// otherwise more jobs end than start, and a rate of failures
			// over starts reads above 100% after a restart.
			s.deps.Metrics.JobStarted()
		}
		if !s.launch(l, s.run) {
			return nil
		}
	}
	return nil
}

// maxUncleanStarts is how many processes in a row may die running a job
// before the next one fails it instead of resuming it.
const maxUncleanStarts = 2

// runningStep is the step a job was in: its last running one.
func runningStep(j Job) string {
	for i := len(j.Steps) - 1; i >= 0; i-- {
		if j.Steps[i].State == Running {
			return j.Steps[i].Name
		}
	}
	if len(j.Steps) > 0 {
		return j.Steps[len(j.Steps)-1].Name
	}
	return StepRegistry
}

// Pause hands the jobs to the next process: none starts from now on, and
// each running job stops at its next step boundary, left running in the
// database as a clean stop leaves it, for the next process's Resume to
// carry on from the step after its last. A job still inside a step when
// ctx ends (a download, a wait for a replica) is stopped there, as Close
// stops it, and its step carries on in the next process from what it had
// saved. Pause returns once every job's goroutine has. Continue undoes it.
func (s *Server) Pause(ctx context.Context) {
	s.mu.Lock()
	s.paused = true
	running := make([]*live, 0, len(s.live))
	for _, l := range s.live {
		if !l.finished {
			running = append(running, l)
		}
	}
	s.mu.Unlock()
	for _, l := range running {
		select {
		case <-l.done:
		case <-ctx.Done():
			l.cancel(errShutdown)
			<-l.done
		}
	}
}

// Continue takes back the jobs Pause stopped, when no other process did:
// they carry on here, each from the step after its last, and jobs start
// again.
func (s *Server) Continue(ctx context.Context) error {
	s.mu.Lock()
	s.paused = false
	s.mu.Unlock()
	return s.resume(ctx)
}

// boundary is where a job stops between two steps when the server is
// handing it over (Pause): the job's context ends as Close ends it, so
// finish leaves it running for the next process.
func (s *Server) boundary(l *live) error {
	s.mu.Lock()
	paused := s.paused
	s.mu.Unlock()
	if !paused {
		return nil
	}
	l.cancel(errShutdown)
	return errShutdown
}

// Close stops every job without marking it cancelled — each stays running
// in the database, and the next process's Resume carries it on — waits for
// their goroutines, and closes every watcher's channel.
func (s *Server) Close() {
	s.mu.Lock()
	again := s.closed
	s.closed = true
	running := make([]*live, 0, len(s.live))
	for _, l := range s.live {
		running = append(running, l)
	}
	s.mu.Unlock()
	for _, l := range running {
		l.cancel(errShutdown)
	}
	if !again {
		close(s.stop)
	}
	s.wg.Wait()
	// The last chance for the ends the database did not take: what is
	// still unsaved now is lost with the process, and those jobs are
	// resumed at the next start as the database has them.
	if s.saveUnsaved() {
		s.deps.Log.Error("jobs ended that the database would not take; the next start resumes them as it has them")
	}
	s.events.close()
}

// Subscribe watches one job's changes, or every job's with jobID "". A job's
// watcher first gets the job as it stands, then each change in order. The
// channel is closed when the watcher falls subscriberBuffer events behind
// (it subscribes again for a fresh snapshot) and when the server closes;
// call the func to stop watching. Events are shared: do not change them.
func (s *Server) Subscribe(jobID string) (<-chan Event, func()) {
	if jobID == "" {
		sub := s.events.add("", nil)
		return sub.ch, func() { s.events.remove(sub) }
	}
	// Under s.mu: a job resumed meanwhile becomes live only after this,
	// so its first change cannot slip in ahead of the snapshot.
	s.mu.Lock()
	l := s.live[jobID]
	if l == nil {
		defer s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		j, seq, err := load(ctx, s.deps.DB, jobID)
		if err != nil {
			if !errors.Is(err, ErrNotFound) {
				s.deps.Log.Error("reading a job to watch", "job", jobID, "err", err)
			}
			ch := make(chan Event)
			close(ch)
			return ch, func() {}
		}
		sub := s.events.add(jobID, &Event{Seq: seq, Job: j})
		return sub.ch, func() { s.events.remove(sub) }
	}
	s.mu.Unlock()
	// Under the job's lock: no change is published between the snapshot
	// and the watcher joining.
	l.mu.Lock()
	sub := s.events.add(jobID, &Event{Seq: l.seq, Job: l.job.clone()})
	l.mu.Unlock()
	return sub.ch, func() { s.events.remove(sub) }
}

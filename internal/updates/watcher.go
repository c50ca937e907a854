package updates

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"modelserve/catalog"
	"modelserve/internal/hf"
	"modelserve/internal/notify"
	"modelserve/internal/operr"
)

// Catalog is what the watcher reads of the catalog (catalog.Store).
type Catalog interface {
	List(ctx context.Context) ([]catalog.Model, error)
	Get(ctx context.Context, name string) (catalog.Model, error)
}

// Registry is what the watcher asks of the registry (hf.Registries): a
// branch's head from the refs, then the files at that commit.
type Registry interface {
	Refs(ctx context.Context, id string) (hf.Refs, error)
	Repo(ctx context.Context, id, revision string) (hf.Repo, error)
}

// Metrics is told of each check and each update noticed
// (internal/metrics).
type Metrics interface {
	UpdateChecked(result string)
	UpdateNoticed()
}

// Deps are what a Watcher needs. DB, Catalog and Registry are required.
type Deps struct {
	// DB holds updates and checks (migrations/0012_updates.sql).
	DB       *sql.DB
	Catalog  Catalog
	Registry Registry
	// Metrics, when set, is told of checks and updates.
	Metrics Metrics
	// Notify is told of each update noticed (--notify-url); nil tells no one.
	Notify *notify.Notifier
	Log    *slog.Logger
	// Interval is the time between two checks of a model that has none of
	// its own; 0 checks none but those that have.
	Interval time.Duration
	// Tick is how often the watcher looks for a model due a check; a
	// minute unless set.
	Tick time.Duration
	// CheckTimeout bounds one check of a repository (the registry's
	// retries included); two minutes unless set.
	CheckTimeout time.Duration
}

// maxChecks is how many checks run at once: the watcher's own, one at a
// time, and one asked for from the API or the console beside it. A
// registry is not to be asked about a whole catalog at once.
const maxChecks = 2

// Watcher checks served models for new weights.
type Watcher struct {
	deps  Deps
	store store
	// slots bounds the checks running at once; busy holds one lock per
	// model, so one model is not checked twice at the same time.
	slots chan struct{}
	mu    sync.Mutex
	busy  map[string]*sync.Mutex
	// try starts the trial of an update noticed for a model whose policy
	// is auto; set by OnAuto before Run.
	try func(ctx context.Context, u Update) error
}

// OnAuto has try called with each update noticed for a model whose policy
// is auto (the update jobs' start). Call it before Run.
func (w *Watcher) OnAuto(try func(ctx context.Context, u Update) error) { w.try = try }

// New checks the dependencies and builds a Watcher; Run starts its loop.
func New(d Deps) (*Watcher, error) {
	for name, missing := range map[string]bool{"DB": d.DB == nil, "Catalog": d.Catalog == nil, "Registry": d.Registry == nil} {
		if missing {
			return nil, errors.New("updates: Deps." + name + " is required")
		}
	}
	if d.Interval < 0 {
		return nil, fmt.Errorf("updates: the interval between checks is %s; give 0 (never) or more", d.Interval)
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Tick <= 0 {
		d.Tick = time.Minute
	}
	if d.CheckTimeout <= 0 {
		d.CheckTimeout = 2 * time.Minute
	}
	return &Watcher{deps: d, store: store{d.DB}, slots: make(chan struct{}, maxChecks), busy: map[string]*sync.Mutex{}}, nil
}

// Run checks each model when its interval has passed since its last check
// (or since it was served), one model at a time, until ctx ends. A model
// served a moment ago is up to date by construction: its first check
// waits an interval.
func (w *Watcher) Run(ctx context.Context) {
	t := time.NewTicker(w.deps.Tick)
	defer t.Stop()
	for {
		w.checkDue(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkDue checks every model whose check is due, in turn.
func (w *Watcher) checkDue(ctx context.Context) {
	models, err := w.deps.Catalog.List(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.deps.Log.Error("update watcher: listing the catalog", "err", err)
		}
		return
	}
	rows, err := w.store.checks(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.deps.Log.Error("update watcher: reading the last checks", "err", err)
		}
		return
	}
	now := time.Now()
	for _, m := range models {
		if ctx.Err() != nil {
			return
		}
		if next := w.status(m, rows[m.Name]).NextCheck; next.IsZero() || now.Before(next) {
			continue
		}
		// The registry's failures are the model's last check; what is
		// left is the watcher's own (the database), said in the log.
		if _, err := w.check(ctx, m); err != nil && ctx.Err() == nil {
			if _, ok := operr.As(err); !ok {
				w.deps.Log.Error("update watcher: checking a model", "model", m.Name, "err", err)
			}
		}
	}
}

// Check checks the model named name now, whatever its interval. A model
// the watcher does not watch is refused (operr.Conflict) without asking
// the registry; a failed check is recorded, and returned as the operator's
// error.
func (w *Watcher) Check(ctx context.Context, name string) (Result, error) {
	m, err := w.deps.Catalog.Get(ctx, name)
	if err != nil {
		return Result{}, err
	}
	return w.check(ctx, m)
}

// check asks the registry where m's branch is and what its files are
// there, and records what it found.
func (w *Watcher) check(ctx context.Context, m catalog.Model) (Result, error) {
	if why := notWatched(m); why != "" {
		return Result{}, operr.New(operr.Conflict, "%s", why)
	}
	select {
	case w.slots <- struct{}{}:
		defer func() { <-w.slots }()
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	lock := w.lockOf(m.Name)
	lock.Lock()
	defer lock.Unlock()

	o := m.Origin
	cctx, cancel := context.WithTimeout(ctx, w.deps.CheckTimeout)
	defer cancel()
	c := Check{Result: ResultFailed}
	found, err := w.look(cctx, m)
	c.At = time.Now()
	switch {
	case err != nil && ctx.Err() != nil:
		// Stopped (the server is stopping, the caller went away): not a
		// result to record.
		return Result{}, ctx.Err()
	case err != nil:
		err = w.sentence(cctx, m, err)
		c.Error, _ = operr.Sentence(err)
	case found.update != nil:
		c.Result, c.Commit = ResultUpdateAvailable, found.head
	default:
		c.Result, c.Commit = ResultUpToDate, found.head
	}
	u, added, serr := w.store.save(ctx, m.Name, o.Revision, c, found.update)
	if serr != nil {
		return Result{}, serr
	}
	if w.deps.Metrics != nil {
		w.deps.Metrics.UpdateChecked(c.Result)
		if added {
			w.deps.Metrics.UpdateNoticed()
		}
	}
	if err != nil {
		return Result{}, err
	}
	res := Result{Model: m.Name, Check: c, Recorded: added}
	if found.update != nil {
		c.UpdateID = u.ID
		res.Check, res.Update = c, &u
		if added {
			w.deps.Log.Info("new weights noticed", "model", m.Name, "repo", o.Repo, "ref", o.Ref,
				"from", hf.Short(o.Revision), "to", hf.Short(u.NewCommit), "files", len(u.Files), "update", u.ID)
			w.deps.Notify.Send(notify.UpdateNoticed(m.Name, o.Repo, hf.Short(o.Revision), hf.Short(u.NewCommit)))
			w.auto(ctx, u)
		}
	}
	return res, nil
}

// auto tries u at once when its model's policy says so. A trial that
// cannot start (another on trial, no job that served the model) leaves
// the update available, and says why in the log.
func (w *Watcher) auto(ctx context.Context, u Update) {
	if w.try == nil {
		return
	}
	policy, err := w.store.policy(ctx, u.Model)
	if err != nil || policy != PolicyAuto {
		return
	}
	if err := w.try(ctx, u); err != nil {
		msg, ok := operr.Sentence(err)
		if !ok {
			msg = err.Error()
		}
		w.deps.Log.Warn("an update noticed could not be tried by itself; it waits for an operator", "model", u.Model, "update", u.ID, "why", msg)
		return
	}
	w.deps.Log.Info("update tried by itself, as its model's policy is auto", "model", u.Model, "update", u.ID)
}

// found is what a look at the registry found: the branch's head, and the
// update when its files differ.
type found struct {
	head   string
	update *Update
}

// look reads the head of m's branch, and the files there when it is not
// the commit m runs.
func (w *Watcher) look(ctx context.Context, m catalog.Model) (found, error) {
	o := m.Origin
	refs, err := w.deps.Registry.Refs(ctx, o.Repo)
	if err != nil {
		return found{}, err
	}
	b, ok := refs.Branch(o.Ref)
	if !ok {
		return found{}, operr.New(operr.NotFound, "%s has no branch %s any more, so %s cannot be watched: serve it again from a branch it has",
			o.Repo, o.Ref, m.Name)
	}
	if b.Commit == o.Revision {
		return found{head: b.Commit}, nil
	}
	// Read at the commit, not the branch: the files are the ones of the
	// head just seen, however the branch moves meanwhile.
	repo, err := w.deps.Registry.Repo(ctx, o.Repo, b.Commit)
	if err != nil {
		return found{}, err
	}
	files := changed(o.Files, repo.Files)
	if len(files) == 0 {
		// The branch moved for something else: a README, another
		// quantisation.
		return found{head: b.Commit}, nil
	}
	return found{head: b.Commit, update: &Update{Model: m.Name, Repo: o.Repo, Ref: o.Ref,
		OldCommit: o.Revision, NewCommit: b.Commit, Files: files, NoticedAt: time.Now(), State: StateAvailable}}, nil
}

// sentence is err as the operator's error: a registry's refusal as it
// is, a check cut off by its time bound said so, and anything else
// logged once with its cause and said in a generic sentence.
func (w *Watcher) sentence(ctx context.Context, m catalog.Model, err error) error {
	if _, ok := operr.As(err); ok {
		return err
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return operr.Wrap(operr.Unavailable, err, "the registry did not answer about %s within %s; it is asked again at the next check",
			m.Origin.Repo, w.deps.CheckTimeout)
	}
	w.deps.Log.Error("update check failed", "model", m.Name, "repo", m.Origin.Repo, "err", err)
	return operr.Wrap(operr.Upstream, err, "the registry's answer about %s could not be read; the server's log says why", m.Origin.Repo)
}

func (w *Watcher) lockOf(model string) *sync.Mutex {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.busy[model]
	if l == nil {
		l = &sync.Mutex{}
		w.busy[model] = l
	}
	return l
}

// Status is what the watcher knows of the model named name.
func (w *Watcher) Status(ctx context.Context, name string) (Status, error) {
	m, err := w.deps.Catalog.Get(ctx, name)
	if err != nil {
		return Status{}, err
	}
	all, err := w.Statuses(ctx, []catalog.Model{m})
	if err != nil {
		return Status{}, err
	}
	return all[0], nil
}

// Statuses are what the watcher knows of each of models, in their order.
func (w *Watcher) Statuses(ctx context.Context, models []catalog.Model) ([]Status, error) {
	rows, err := w.store.checks(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Status, 0, len(models))
	for _, m := range models {
		st := w.status(m, rows[m.Name])
		if m.Origin != nil {
			if st.Available, err = w.store.available(ctx, m.Name, m.Origin.Revision); err != nil {
				return nil, err
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// status is what row says of m, without the update available.
func (w *Watcher) status(m catalog.Model, row checkRow) Status {
	st := Status{Model: m.Name, interval: w.deps.Interval, Policy: cmp.Or(row.policy, PolicyManual), InPlace: !row.besideOnly}
	if row.interval != nil {
		st.interval, st.IntervalSet = *row.interval, true
	}
	st.Interval = st.interval.String()
	if m.Origin != nil {
		st.Repo, st.Ref, st.Commit = m.Origin.Repo, m.Origin.Ref, m.Origin.Revision
	}
	st.NotWatched = notWatched(m)
	st.Watched = st.NotWatched == ""
	if !st.Watched {
		return st
	}
	since := m.AddedAt
	// A check of another commit was of the model as it was before it was
	// served again; but one that found the branch at the commit the model
	// runs now (the update it then took) says it is up to date as of that
	// check: after a promotion, the row said "not checked yet".
	switch {
	case row.last == nil:
	case row.served == m.Origin.Revision:
		st.LastCheck = row.last
		since = row.last.At
	case row.last.Result == ResultUpdateAvailable && row.last.Commit == m.Origin.Revision:
		c := *row.last
		c.Result, c.UpdateID = ResultUpToDate, 0
		st.LastCheck = &c
		since = c.At
	}
	if st.interval > 0 {
		st.NextCheck = since.Add(st.interval)
	}
	return st
}

// SetSettings gives the model named name its own interval between checks
// (0: never; nil: the server's default), what is done with its updates
// (PolicyManual, PolicyAuto; "" is manual), and whether an update with no
// room beside the model may replace its replica in place (inPlace).
func (w *Watcher) SetSettings(ctx context.Context, name string, d *time.Duration, policy string, inPlace bool) (Status, error) {
	if _, err := w.deps.Catalog.Get(ctx, name); err != nil {
		return Status{}, err
	}
	if d != nil {
		if err := checkInterval(*d); err != nil {
			return Status{}, err
		}
	}
	switch policy {
	case "":
		policy = PolicyManual
	case PolicyManual, PolicyAuto:
	default:
		return Status{}, operr.New(operr.Invalid, "an update policy is manual (an operator tries each update) or auto (each is tried as soon as it is noticed), not %s", operr.Quote(policy))
	}
	if err := w.store.setSettings(ctx, name, d, policy, inPlace); err != nil {
		return Status{}, err
	}
	return w.Status(ctx, name)
}

// InPlace is whether an update of model, or a version of it served
// again, may replace its replica in place when there is no room beside
// it: yes unless its operator said no (SetSettings).
func (w *Watcher) InPlace(ctx context.Context, model string) (bool, error) {
	return w.store.inPlace(ctx, model)
}

// List returns a page of updates, newest first.
func (w *Watcher) List(ctx context.Context, o ListOptions) ([]Update, error) {
	return w.store.list(ctx, o)
}

// Get returns the update with id, or an error matching ErrNotFound.
func (w *Watcher) Get(ctx context.Context, id int64) (Update, error) {
	return w.store.get(ctx, id)
}

// SetState records what became of update id: running (served as a canary),
// promoted, rolled_back or dismissed.
func (w *Watcher) SetState(ctx context.Context, id int64, state string) error {
	switch state {
	case StateAvailable, StateRunning, StatePromoted, StateRolledBack, StateDismissed:
	default:
		return fmt.Errorf("an update's state is not %q", state)
	}
	res, err := w.store.db.ExecContext(ctx, `UPDATE updates SET state = ? WHERE id = ?`, state, id)
	if err != nil {
		return fmt.Errorf("record update %d as %s: %w", id, state, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return operr.Wrap(operr.NotFound, ErrNotFound, "there is no update %d: GET /api/v1/updates lists them", id)
	}
	return nil
}

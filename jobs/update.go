package jobs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"modelserve/catalog"
	"modelserve/internal/canary"
	"modelserve/internal/hf"
	"modelserve/internal/operr"
	"modelserve/internal/updates"
)

// An update serves the new weights the watcher noticed for a catalog model
// beside the version it runs, as its canary: the same pipeline as the
// serve that made the model (the same file, context and hardware, at the
// new commit), then a trial (trial.go) that promotes the new version or
// rolls it back. The canary is a catalog entry of its own
// (catalog.CanaryName), so either fleet runs it as it runs any model, and
// the gateway sends it its share of the model's requests.

// Updates are the updates the watcher noticed (updates.Watcher).
type Updates interface {
	Get(ctx context.Context, id int64) (updates.Update, error)
	List(ctx context.Context, o updates.ListOptions) ([]updates.Update, error)
	SetState(ctx context.Context, id int64, state string) error
	// InPlace is whether a version of model with no room beside it may
	// replace its replica in place (inplace.go), as its operator says.
	InPlace(ctx context.Context, model string) (bool, error)
}

// Versions record how each version of a model ended, and list them
// (catalog.Store); the catalog records the rest as entries change.
type Versions interface {
	EndVersion(ctx context.Context, model, commit, state, reason string) error
	Versions(ctx context.Context, model string) ([]catalog.Version, error)
}

// Meters count what one catalog entry's requests do from when Measure is
// called (the gateway, through an adapter): the trial compares the
// canary's with its model's over the same time.
type Meters interface {
	Measure(name string) Meter
}

// Meter is one entry's count since its Measure; Stop ends it.
type Meter interface {
	Read() canary.Arm
	Stop()
}

// Evals run a model's eval suite against one of its versions, by the
// entry's name (target); ok is false when the model has no suite.
type Evals interface {
	Run(ctx context.Context, model, target string) (result canary.Eval, ok bool, err error)
}

// DefaultShare is the part of a model's requests its canary takes unless
// the operator says otherwise: 10%.
const DefaultShare = 0.1

// UpdateRequest asks for a model's update to be served beside it.
type UpdateRequest struct {
	Model string
	// UpdateID is the update to serve; 0 takes the newest one available
	// from the commit the model runs.
	UpdateID int64
	// Share is the part of the model's requests the canary takes once its
	// eval has passed; 0 takes Deps.Share.
	Share float64
	By    string
}

// Update starts a job serving model's update as its canary, and judging
// it. It is refused, starting nothing, when the model has no update
// available, one is on trial already, or no job served the model (so
// there is no request to serve its update the same way).
func (s *Server) Update(ctx context.Context, u UpdateRequest) (Job, error) {
	if s.deps.Updates == nil || s.deps.Fleet == nil {
		return Job{}, operr.New(operr.Unavailable, "this modelserve runs no fleet or watches no repository, so it cannot try an update")
	}
	m, err := s.deps.Catalog.Get(ctx, u.Model)
	if err != nil {
		return Job{}, err
	}
	if m.Canary != nil {
		return Job{}, invalid("%s is a version of %s on trial: update %s", m.Name, m.Canary.Of, m.Canary.Of)
	}
	if m.Origin == nil {
		return Job{}, operr.New(operr.Conflict, "%s was added without a repository it came from, so it has no updates", m.Name)
	}
	up, err := s.pickUpdate(ctx, m, u.UpdateID)
	if err != nil {
		return Job{}, err
	}
	share := u.Share
	if share == 0 {
		share = s.deps.Share
	}
	if share <= 0 || share > 1 {
		return Job{}, invalid("the canary's share of %s's requests is above 0 and at most 1, not %v", m.Name, share)
	}
	if id := s.onTrial(m.Name); id != "" {
		return Job{}, operr.Wrap(operr.Conflict, ErrConflict, "job %s is trying an update of %s already: promote or roll it back first", id, m.Name)
	}
	req, err := s.besideRequest(ctx, m, up.NewCommit, "its update", u.By)
	if err != nil {
		return Job{}, err
	}
	req.Description = fmt.Sprintf("%s at %s, on trial beside %s", m.Name, hf.Short(up.NewCommit), hf.Short(m.Origin.Revision))
	req.UpdateID, req.Share = up.ID, share
	if req.InPlace, err = s.mayReplace(ctx, m.Name); err != nil {
		return Job{}, err
	}
	j, err := s.start(ctx, req, "")
	if err != nil {
		return Job{}, err
	}
	if err := s.deps.Updates.SetState(ctx, up.ID, updates.StateRunning); err != nil {
		s.deps.Log.Warn("could not record an update as running", "update", up.ID, "err", err)
	}
	return j, nil
}

// besideRequest is the request serving m at commit beside it, as its
// canary: the request of the newest job that served m to the end, at the
// commit, so the version is served the same way (file, context,
// hardware). what names the version for the sentence when no job served
// m: "its update".
func (s *Server) besideRequest(ctx context.Context, m catalog.Model, commit, what, by string) (Request, error) {
	base, ok, err := lastServed(ctx, s.deps.DB, m.Name)
	if err != nil {
		return Request{}, err
	}
	if !ok {
		return Request{}, operr.New(operr.Conflict, "no job served %s, so %s cannot be served the same way: serve %s at %s yourself",
			m.Name, what, m.Origin.Repo, hf.Short(commit))
	}
	req := base.Request
	req.Revision, req.Name, req.Aliases = commit, catalog.CanaryName(m.Name, commit), nil
	req.CanaryOf, req.Share = m.Name, s.deps.Share
	req.Replicas, req.IfAbsent, req.Class, req.By = 1, true, m.Class, by
	return req, nil
}

// pickUpdate is update id of m, or the newest available from the commit m
// runs when id is 0.
func (s *Server) pickUpdate(ctx context.Context, m catalog.Model, id int64) (updates.Update, error) {
	if id == 0 {
		list, err := s.deps.Updates.List(ctx, updates.ListOptions{Model: m.Name, Limit: 50})
		if err != nil {
			return updates.Update{}, err
		}
		for _, up := range list {
			if up.State == updates.StateAvailable && up.OldCommit == m.Origin.Revision {
				return up, nil
			}
		}
		return updates.Update{}, operr.New(operr.Conflict, "%s has no update available: POST /api/v1/catalog/%s/check asks its repository now", m.Name, m.Name)
	}
	up, err := s.deps.Updates.Get(ctx, id)
	if err != nil {
		return updates.Update{}, err
	}
	switch {
	case up.Model != m.Name:
		return updates.Update{}, invalid("update %d is of %s, not %s", id, up.Model, m.Name)
	case up.OldCommit != m.Origin.Revision:
		return updates.Update{}, operr.New(operr.Conflict, "update %d is from %s, and %s runs %s now: check for a newer one", id, hf.Short(up.OldCommit), m.Name, hf.Short(m.Origin.Revision))
	case up.State != updates.StateAvailable:
		return updates.Update{}, operr.New(operr.Conflict, "update %d of %s is %s already", id, m.Name, up.State)
	}
	return up, nil
}

// OnTrial is the id of the job trying an update of model, "" for none.
func (s *Server) OnTrial(model string) string { return s.onTrial(model) }

func (s *Server) onTrial(model string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, l := range s.live {
		if l.job.Request.CanaryOf == model && !l.finished {
			return id
		}
	}
	return ""
}

// lastServed is the newest job that served model to the end: its request
// is how the model's update is served.
func lastServed(ctx context.Context, db *sql.DB, model string) (Job, bool, error) {
	j, _, err := scanJob(db.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs
		WHERE model = ? AND state = ? ORDER BY started DESC LIMIT 1`, model, Done))
	if errors.Is(err, sql.ErrNoRows) {
		return Job{}, false, nil
	}
	if err != nil {
		return Job{}, false, fmt.Errorf("read the job that served %s: %w", model, err)
	}
	return j, true, nil
}

// noRoomBeside is the sentence of a version with no room beside its model
// (req.CanaryOf) that may not be served in place of its replica (its
// update settings say in_place: false), holds saying what holds the room:
// an update's canary, or a version served again (a restore).
func noRoomBeside(req Request, holds string) error {
	if req.RestoreOf != 0 {
		return sentencef("there is no room beside %s to serve its version %s again%s; free that room (stop or scale down another model) "+
			"and restore it again, or let it be served in place, %s's requests waiting while it loads: "+
			`PUT /api/v1/catalog/%s/updates with {"in_place": true}`,
			req.CanaryOf, hf.Short(req.Revision), holds, req.CanaryOf, req.CanaryOf)
	}
	return sentencef("there is no room beside %s for its canary%s; free that room (stop or scale down another model) "+
		"and try the update again, or serve the new commit as %s in its place, without a trial", req.CanaryOf, holds, req.CanaryOf)
}

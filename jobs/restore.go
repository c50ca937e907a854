package jobs

import (
	"context"
	"fmt"

	"modelserve/catalog"
	"modelserve/internal/hf"
	"modelserve/internal/operr"
)

// A restore serves a version a model ran before again: after a promotion
// there was no way back but to serve the old commit by hand, under a new
// name or with the model gone meanwhile. It is an update's pipeline at the
// old commit (the same file, context and hardware as the serve that made
// the model), beside the model as its canary, and then an update's
// promotion without a trial: the operator chose that version, and it
// served before. The promotion gives the restored version every request
// while the model's replicas restart on it, so no request is dropped; a
// version whose engine does not start ends the job with the sentence, and
// the version serving now serves on (undo).

// Restore starts a job serving model's version id (catalog.Version.ID)
// again. It is refused, starting nothing, when the model runs that version
// already, another version of it is on trial or being restored, or no job
// served the model.
func (s *Server) Restore(ctx context.Context, model string, id int64, by string) (Job, error) {
	if s.deps.Versions == nil || s.deps.Fleet == nil {
		return Job{}, operr.New(operr.Unavailable, "this modelserve runs no fleet or keeps no versions, so it cannot serve a version again")
	}
	m, err := s.deps.Catalog.Get(ctx, model)
	if err != nil {
		return Job{}, err
	}
	if m.Canary != nil {
		return Job{}, invalid("%s is a version of %s on trial: restore a version of %s", m.Name, m.Canary.Of, m.Canary.Of)
	}
	if m.Origin == nil {
		return Job{}, operr.New(operr.Conflict, "%s was added without a repository it came from, so it has no versions to restore", m.Name)
	}
	v, err := s.version(ctx, m.Name, id)
	if err != nil {
		return Job{}, err
	}
	switch {
	case v.Commit == m.Origin.Revision:
		return Job{}, operr.New(operr.Conflict, "%s runs version %d (%s) already", m.Name, id, hf.Short(v.Commit))
	case v.State == catalog.VersionCanary:
		return Job{}, operr.New(operr.Conflict, "version %d of %s is on trial now: promote it or roll it back", id, m.Name)
	}
	if jid := s.onTrial(m.Name); jid != "" {
		return Job{}, operr.Wrap(operr.Conflict, ErrConflict, "job %s is serving another version of %s beside it already: let it end first", jid, m.Name)
	}
	req, err := s.besideRequest(ctx, m, v.Commit, "its version "+hf.Short(v.Commit), by)
	if err != nil {
		return Job{}, err
	}
	req.Description = fmt.Sprintf("%s at %s, served again in place of %s", m.Name, hf.Short(v.Commit), hf.Short(m.Origin.Revision))
	// The share is the canary's rule; a restored version takes none of
	// the model's requests until its promotion gives it every one.
	req.RestoreOf = v.ID
	if req.InPlace, err = s.mayReplace(ctx, m.Name); err != nil {
		return Job{}, err
	}
	return s.start(ctx, req, "")
}

// version is model's version id, or a sentence saying there is none.
func (s *Server) version(ctx context.Context, model string, id int64) (catalog.Version, error) {
	vs, err := s.deps.Versions.Versions(ctx, model)
	if err != nil {
		return catalog.Version{}, err
	}
	for _, v := range vs {
		if v.ID == id {
			return v, nil
		}
	}
	return catalog.Version{}, operr.New(operr.NotFound, "%s has no version %d: GET /api/v1/catalog/%s/versions lists them", model, id, model)
}

// serveAgain promotes the version p restored, which answered its smoke
// test: the promotion of an update, without its trial.
func (s *Server) serveAgain(ctx context.Context, l *live, p *pipeline) error {
	of, at := p.req.CanaryOf, hf.Short(p.repo.Commit)
	was := "the version before"
	if m, err := s.deps.Catalog.Get(ctx, of); err == nil && m.Origin != nil {
		was = hf.Short(m.Origin.Revision)
	}
	s.step(l, StepRestore, Running, fmt.Sprintf("serving %s at %s again in place of %s, as asked", of, at, was))
	if err := s.promote(ctx, l, p, StepRestore); err != nil {
		return failedAt(StepRestore, err)
	}
	s.step(l, StepRestore, Done, fmt.Sprintf("%s serves %s again; %s is retired, and can be restored the same way", of, at, was))
	return nil
}

// notServedAgain is err, the sentence of why a restore's version did not
// start, said of the restore: the version serving now serves on (undo).
func notServedAgain(req Request, err error) error {
	msg, ok := operr.Sentence(err)
	if req.RestoreOf == 0 || !ok {
		return err
	}
	return sentencef("%s at %s was not served again: %s; %s serves on as it did", req.CanaryOf, hf.Short(req.Revision), msg, req.CanaryOf)
}

package jobs

import (
	"context"
	"time"

	"modelserve/catalog"
	"modelserve/internal/hf"
	"modelserve/internal/notify"
	"modelserve/internal/updates"
)

// undoTimeout bounds what taking a job's additions back may take: a few
// writes to the catalog and the updates, on a database that may be slow.
const undoTimeout = 30 * time.Second

// undo takes back what a job that ended without serving its model had
// added, once no step of it runs (finish calls it for every ending):
//
//   - an update's canary, whatever ended its trial but a promotion (the
//     verdict, a cancel, the poison-job guard, a step failing, no room to
//     place it), is rolled back: its entry goes, so its replicas stop,
//     its version is rolled_back with the job's reason, and so is the
//     update; one whose model already runs its commit (a promotion that
//     failed after the catalog took it) is promoted instead;
//   - a serve job cancelled or failed after its catalog step removes the
//     entry it added, and never one that was there before it (Job.Added).
//
// state and msg are the ending about to be recorded (a failure, undone
// before it is said), or "" for one recorded already (a cancel). What
// fails here is logged: the job's end stands.
func (s *Server) undo(l *live, state, msg string) {
	j, _ := l.snapshot()
	if state != "" {
		j.State, j.Error = state, msg
	}
	if j.State == Running || j.State == Done {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
	defer cancel()
	if j.Request.CanaryOf != "" {
		if was := l.takeBack().Entry; was != nil {
			// Replaced in place, and neither kept nor brought back: the
			// model goes back to the version it served, as the trial
			// ends.
			s.setTakeBack(l, func(b *takeBack) { b.Entry = nil })
			if err := s.deps.Catalog.Add(ctx, *was, was.AddedBy); err != nil {
				s.deps.Log.Error("putting a model back on its version after its in-place trial ended", "model", was.Name, "err", err)
			}
			s.refresh()
		}
		s.endTrial(ctx, j)
		if sc := l.takeBack().Scaling; sc != nil {
			// One of its replicas gave its room to the version, which is
			// gone now: the model takes it back.
			s.setTakeBack(l, func(b *takeBack) { b.Scaling = nil })
			if err := s.deps.Catalog.SetScaling(ctx, j.Request.CanaryOf, sc.Min, sc.Max, nil); err != nil {
				s.deps.Log.Error("scaling a model back after its in-place trial ended", "model", j.Request.CanaryOf, "err", err)
			}
		}
		return
	}
	if !j.Added || j.Model == "" {
		return
	}
	s.removeEntry(ctx, j.Model)
	s.deps.Log.Info("a job that did not serve its model took its catalog entry out again", "job", j.ID, "model", j.Model, "state", j.State)
}

// endTrial ends the trial of the update job j, which ended without being
// promoted: promoted after all when its model's entry already runs the
// canary's commit, rolled back otherwise.
func (s *Server) endTrial(ctx context.Context, j Job) {
	of, name, commit, id := j.Request.CanaryOf, or(j.Model, j.Request.Name), j.Commit, j.Request.UpdateID
	if m, err := s.deps.Catalog.Get(ctx, of); err == nil && commit != "" && m.Origin != nil && m.Origin.Revision == commit {
		if j.Added {
			s.removeEntry(ctx, name)
		}
		s.setUpdate(ctx, id, updates.StatePromoted)
		s.deps.Log.Info("update promoted, its job having failed after the catalog took it", "job", j.ID, "model", of, "commit", commit)
		s.deps.Notify.Send(notify.Promoted(of, hf.Short(commit)))
		return
	}
	why := j.Error
	if j.State == Cancelled {
		why = "the update's job was cancelled"
	}
	if j.Added {
		s.removeEntry(ctx, name)
	}
	if j.Request.RestoreOf != 0 {
		// A version served before goes back to retired, saying why it
		// could not be served again; it may be restored once that is
		// mended.
		if j.State == Cancelled {
			why = "the restore's job was cancelled"
		}
		if j.Added {
			s.endVersion(ctx, of, commit, catalog.VersionRetired, "served again by job "+j.ID+", which ended: "+why)
		}
		s.deps.Log.Info("a restore ended without serving its version", "job", j.ID, "model", of, "commit", hf.Short(commit), "why", why)
		return
	}
	// A version is written with the canary's entry: one refused before
	// that has none to end.
	if j.Added {
		s.endVersion(ctx, of, commit, catalog.VersionRolledBack, why)
	}
	s.setUpdate(ctx, id, updates.StateRolledBack)
	s.deps.Log.Info("update rolled back", "job", j.ID, "model", of, "commit", hf.Short(commit), "why", why)
	s.deps.Notify.Send(notify.RolledBack(of, hf.Short(commit), why))
}

// removeEntry takes name out of the catalog, so its replicas stop, and has
// the gateway follow at once.
func (s *Server) removeEntry(ctx context.Context, name string) {
	if err := s.deps.Catalog.Remove(ctx, name); err != nil && !isNotFound(err) {
		s.deps.Log.Error("removing the catalog entry of a job that did not serve it", "model", name, "err", err)
	}
	s.refresh()
}

func (s *Server) setUpdate(ctx context.Context, id int64, state string) {
	if s.deps.Updates == nil || id == 0 {
		return
	}
	if err := s.deps.Updates.SetState(ctx, id, state); err != nil {
		s.deps.Log.Warn("could not record an update's state", "update", id, "state", state, "err", err)
	}
}

// endVersion records how model's version at commit ended; what fails is
// logged, the job's end standing.
func (s *Server) endVersion(ctx context.Context, model, commit, state, why string) {
	if s.deps.Versions == nil || commit == "" {
		return
	}
	if err := s.deps.Versions.EndVersion(ctx, model, commit, state, why); err != nil {
		s.deps.Log.Warn("could not record how a version ended", "model", model, "state", state, "err", err)
	}
}

package jobs

import (
	"context"
	"fmt"
	"time"

	"modelserve/catalog"
	"modelserve/internal/canary"
	"modelserve/internal/hf"
	"modelserve/internal/notify"
	"modelserve/internal/operr"
	"modelserve/internal/updates"
	"modelserve/internal/words"
)

// The trial of an update, once its canary answers the smoke test:
//
//  1. eval: the model's eval suite, when it has one, on the current
//     version and on the canary; a lower pass rate rolls the canary back
//     before any client reaches it.
//  2. canary: the gateway sends it its share of the model's requests, and
//     both versions are measured over the same time, until the policy's
//     count or time bound; failing fast rolls it back at once. The suite
//     runs again at the end, now that it has served.
//  3. verdict: promoted (the model's entry becomes the new version, its
//     replicas restart on it while the canary takes every request, then
//     the canary goes) or rolled back (the canary goes; the model never
//     stopped serving). Nothing is deleted from the mirror. A trial that
//     ends any other way (cancelled, failed, stopped by the poison-job
//     guard) is rolled back too, as the job ends (undo.go).
//
// An operator may decide at any point (Promote, RollBack). A restart of
// modelserve resumes the job: the canary keeps its entry and share, and
// its window begins anew, the counts before it having been in memory.

// decision is an operator's verdict, sent to the job trying the update.
type decision struct {
	verdict canary.Verdict
	by      string
}

// Promote promotes the version of model on trial, as an operator decides.
func (s *Server) Promote(ctx context.Context, model, by string) (Job, error) {
	return s.decide(ctx, model, decision{canary.Promote, by})
}

// RollBack rolls the version of model on trial back, as an operator decides.
func (s *Server) RollBack(ctx context.Context, model, by string) (Job, error) {
	return s.decide(ctx, model, decision{canary.RollBack, by})
}

func (s *Server) decide(ctx context.Context, model string, d decision) (Job, error) {
	id := s.onTrial(model)
	if id == "" {
		return Job{}, operr.Wrap(operr.Conflict, ErrConflict, "no update of %s is on trial: GET /api/v1/catalog/%s/versions says which it runs", model, model)
	}
	l := s.liveJob(id)
	select {
	case l.decisions <- d:
	default:
		return Job{}, operr.Wrap(operr.Conflict, ErrConflict, "job %s has a decision to act on already", id)
	}
	select {
	case <-l.done:
	case <-ctx.Done():
	}
	j, _ := l.snapshot()
	return j, nil
}

// trial judges the canary p served, and promotes or rolls it back.
func (s *Server) trial(ctx context.Context, l *live, p *pipeline) error {
	name, of := p.name, p.req.CanaryOf
	parent, err := s.deps.Catalog.Get(ctx, of)
	if err != nil {
		return failedAt(StepEval, err)
	}
	was := ""
	if parent.Origin != nil {
		was = hf.Short(parent.Origin.Revision)
	}
	v, why, err := s.evaluate(ctx, l, p, StepEval, "before it takes any request")
	byHand := false
	if err == nil && v != canary.RollBack {
		v, why, byHand, err = s.watch(ctx, l, p)
	}
	if err == nil && v == canary.Promote && !byHand {
		// Its share ends first: the suite asks each version alone.
		if err := s.setShare(ctx, name, 0); err != nil {
			return failedAt(StepVerdict, err)
		}
		// Run under the verdict it decides: under the eval step, which
		// ended before the canary began, the page counted the canary's
		// minutes as the eval's, and the canary's as none.
		if ev, evWhy, eerr := s.evaluate(ctx, l, p, StepVerdict, "after serving its share"); eerr != nil {
			err = eerr
		} else if ev == canary.RollBack {
			v, why = ev, evWhy
		} else if evWhy != "" {
			why += "; " + evWhy
		}
	}
	if err != nil {
		// Cancelled, failed, or the server stopping: the job's end says
		// which, and a trial that ends but in a promotion is rolled back
		// there (undo), whatever it was at.
		return err
	}
	if v == canary.RollBack {
		// Rolled back as the job ends (undo), as any trial that is not
		// promoted is.
		s.step(l, StepVerdict, Running, "rolling "+name+" back: "+why)
		return failedAt(StepVerdict, &rolledBack{sentencef("%s rolled back, %s still serving %s: %s", name, of, was, why)})
	}
	s.step(l, StepVerdict, Running, "promoting "+name+": "+why)
	if err := s.promote(ctx, l, p, StepVerdict); err != nil {
		return failedAt(StepVerdict, err)
	}
	s.step(l, StepVerdict, Done, fmt.Sprintf("%s promoted: %s now serves %s; %s", name, of, hf.Short(p.repo.Commit), why))
	return nil
}

// evaluate runs the model's eval suite on both versions, when it has one
// and an Evals runs it, and says whether the canary did worse. step is the
// step it is told under: the eval step before the canary's share, the
// verdict after it.
func (s *Server) evaluate(ctx context.Context, l *live, p *pipeline, step, when string) (canary.Verdict, string, error) {
	final := step != StepEval
	if s.deps.Evals == nil {
		if !final {
			s.step(l, step, Skipped, "this modelserve runs no eval suites")
		}
		return canary.Promote, "", nil
	}
	of, name := p.req.CanaryOf, p.name
	s.step(l, step, Running, fmt.Sprintf("running %s's eval suite on %s and on %s, %s", of, of, name, when))
	cur, ok, err := s.deps.Evals.Run(ctx, of, of)
	if err != nil {
		return canary.Wait, "", failedAt(step, err)
	}
	if !ok {
		if !final {
			s.step(l, step, Skipped, fmt.Sprintf("%s has no eval suite: PUT /api/v1/catalog/%s/evals gives it one, which updates are then judged by", of, of))
		}
		return canary.Promote, "", nil
	}
	can, _, err := s.deps.Evals.Run(ctx, of, name)
	if err != nil {
		return canary.Wait, "", failedAt(step, err)
	}
	v, why := canary.JudgeEval(cur, can)
	if !final {
		state := Done
		if v == canary.RollBack {
			state = RolledBack
		}
		s.step(l, step, state, why+", "+when)
	}
	return v, why + ", " + when, nil
}

// watch sends the canary its share of the model's requests and measures
// both versions until the policy, or an operator (byHand), decides.
func (s *Server) watch(ctx context.Context, l *live, p *pipeline) (v canary.Verdict, why string, byHand bool, err error) {
	of, name := p.req.CanaryOf, p.name
	if err := s.setShare(ctx, name, p.req.Share); err != nil {
		return canary.Wait, "", false, failedAt(StepCanary, err)
	}
	if s.deps.Meters == nil {
		s.step(l, StepCanary, Skipped, "nothing measures the gateway's requests here: judged on its eval alone")
		return canary.Promote, "judged on its eval alone", false, nil
	}
	cur, can := s.deps.Meters.Measure(of), s.deps.Meters.Measure(name)
	defer cur.Stop()
	defer can.Stop()
	pol := s.deps.Policy
	began := time.Now()
	tick := time.NewTicker(s.deps.Poll)
	defer tick.Stop()
	for {
		c, n := cur.Read(), can.Read()
		if h, ok := s.health(name); ok && h.Parked {
			why := fmt.Sprintf("its replicas keep failing and are parked: %s", h.Reason)
			s.step(l, StepCanary, RolledBack, why)
			return canary.RollBack, why, false, nil
		}
		v, why := pol.Judge(c, n, time.Since(began))
		switch v {
		case canary.Wait:
			s.step(l, StepCanary, Running, fmt.Sprintf("%s of %s's requests: %s; failed: %d of its %d, against %d of the current version's %d",
				words.Percent(p.req.Share), of, why, n.Failed, n.Requests, c.Failed, c.Requests))
		case canary.RollBack:
			s.step(l, StepCanary, RolledBack, why)
			return v, why, false, nil
		default:
			s.step(l, StepCanary, Done, why)
			return v, why, false, nil
		}
		select {
		case d := <-l.decisions:
			did := "promoted"
			if d.verdict == canary.RollBack {
				did = "rolled back"
			}
			why := fmt.Sprintf("%s by %s, after %d of its requests", did, or(d.by, "an operator"), n.Requests)
			s.step(l, StepCanary, Done, why)
			return d.verdict, why, true, nil
		case <-ctx.Done():
			return canary.Wait, "", false, ctx.Err()
		case <-tick.C:
		}
	}
}

// setShare gives the canary name share of its model's requests; nothing
// else of its entry changes, so its replicas run on.
func (s *Server) setShare(ctx context.Context, name string, share float64) error {
	if err := s.deps.Catalog.SetShare(ctx, name, share); err != nil {
		return err
	}
	s.refresh()
	return nil
}

// refresh has the gateway read the catalog now when it can
// (gateway.Gateway.Refresh), rather than within its second: a share, a
// promotion or a roll-back is followed from the next request.
func (s *Server) refresh() {
	if r, ok := s.deps.Gateway.(interface{ Refresh() }); ok {
		r.Refresh()
	}
}

// promote makes the canary the model: every request goes to the canary
// while the model's entry takes the new version and its replicas restart
// on it; then the canary goes. Replicas that cannot start on the new
// version put the entry back as it was (restore): a model whose entry
// points at a version that does not run serves nothing once the canary
// goes. step is the step it is told under: an update's verdict, a
// restore's own.
func (s *Server) promote(ctx context.Context, l *live, p *pipeline, step string) error {
	of, name := p.req.CanaryOf, p.name
	if err := s.setShare(ctx, name, 1); err != nil {
		return err
	}
	before, changed, err := s.takeVersion(ctx, of, name)
	if err != nil {
		return err
	}
	if before.Scaling.Min > 0 {
		s.step(l, step, Running, fmt.Sprintf("%s takes every request of %s while its replicas restart on %s", name, of, hf.Short(p.repo.Commit)))
		if err := s.waitRestarted(ctx, of, changed); err != nil {
			if ctx.Err() != nil {
				return err
			}
			if before.Origin == nil || before.Origin.Revision == p.repo.Commit {
				// Resumed after the entry took the new version: the entry
				// before it is gone, and only its commit is known.
				back := "the commit it ran before"
				if p.req.UpdateID != 0 && s.deps.Updates != nil {
					if up, uerr := s.deps.Updates.Get(ctx, p.req.UpdateID); uerr == nil {
						back = hf.Short(up.OldCommit)
					}
				}
				return sentencef("%s's replicas did not start on %s: %s; the promotion began before modelserve restarted, "+
					"so the entry before it is not kept to go back to: serve %s at %s again", of, hf.Short(p.repo.Commit), err, of, back)
			}
			return s.restore(ctx, l, p, step, before, err)
		}
	}
	return s.promoted(ctx, p)
}

// takeVersion gives model's entry the version of the entry name (its
// canary's) and returns the entry as it was, and when it changed: the
// fleet replaces the model's replicas from then. The branch the model is
// watched on stays its own.
func (s *Server) takeVersion(ctx context.Context, model, name string) (before catalog.Model, changed time.Time, err error) {
	can, err := s.deps.Catalog.Get(ctx, name)
	if err != nil {
		return catalog.Model{}, time.Time{}, err
	}
	m, err := s.deps.Catalog.Get(ctx, model)
	if err != nil {
		return catalog.Model{}, time.Time{}, err
	}
	// The entry as it served: its origin is replaced below, not changed.
	before = m
	ref, kind := "", ""
	if m.Origin != nil {
		ref, kind = m.Origin.Ref, m.Origin.RefKind
	}
	m.Source, m.Origin, m.Profiles = can.Source, can.Origin, can.Profiles
	m.ContextLength, m.MaxOutput, m.Capabilities = can.ContextLength, can.MaxOutput, can.Capabilities
	m.Origin.Ref, m.Origin.RefKind = ref, kind
	changed = time.Now()
	if err := s.deps.Catalog.Add(ctx, m, m.AddedBy); err != nil {
		return catalog.Model{}, time.Time{}, err
	}
	s.refresh()
	return before, changed, nil
}

// promoted ends the promotion of the version p served, its model's entry
// and replicas being on it: the version's own entry goes, and the update
// is promoted, and said to be.
func (s *Server) promoted(ctx context.Context, p *pipeline) error {
	of := p.req.CanaryOf
	if err := s.deps.Catalog.Remove(ctx, p.name); err != nil {
		return err
	}
	s.refresh()
	s.setUpdate(ctx, p.req.UpdateID, updates.StatePromoted)
	s.deps.Log.Info("update promoted", "model", of, "commit", p.repo.Commit)
	s.deps.Notify.Send(notify.Promoted(of, hf.Short(p.repo.Commit)))
	return nil
}

// putBack gives model's entry back as it was (was) and waits for a
// replica of it to serve.
func (s *Server) putBack(ctx context.Context, was catalog.Model) error {
	restored := time.Now()
	if err := s.deps.Catalog.Add(ctx, was, was.AddedBy); err != nil {
		return fmt.Errorf("put %s back on %s: %w", was.Name, hf.Short(was.Origin.Revision), err)
	}
	s.refresh()
	return s.waitRestarted(ctx, was.Name, restored)
}

// restore puts model's entry back as it was before the promotion (was),
// its replicas having failed to start on the new version (why), and waits
// for them to serve again on the version before, the canary taking every
// request meanwhile. The error it returns is the trial's ending: the job
// then rolls the canary back (undo), and its version and update with it.
func (s *Server) restore(ctx context.Context, l *live, p *pipeline, step string, was catalog.Model, why error) error {
	of, name, old := p.req.CanaryOf, p.name, hf.Short(was.Origin.Revision)
	reason := fmt.Sprintf("the promoted version's replicas could not start: %s", why)
	s.step(l, step, Running, fmt.Sprintf("%s; %s goes back to %s, and %s takes every request of it until %s serves again", reason, of, old, name, old))
	if err := s.putBack(ctx, was); err != nil {
		if _, ok := operr.Sentence(err); !ok || ctx.Err() != nil {
			return err
		}
		return sentencef("%s rolled back, and %s is back on %s, which does not start either: %s; before it, %s", name, of, old, err, reason)
	}
	s.deps.Log.Warn("a promotion rolled back: the new version did not start", "model", of, "commit", p.repo.Commit, "why", why)
	return sentencef("%s rolled back, %s serving %s again: %s", name, of, old, reason)
}

// waitRestarted waits for a ready replica of model started since, bounded
// by the placement's own timeout. A park ends the wait at once: the fleet
// starts a parked model no more, and waiting out the timeout held a
// promotion for half an hour with nothing of the new version serving.
func (s *Server) waitRestarted(ctx context.Context, model string, since time.Time) error {
	return s.waitStarted(ctx, model, since, false)
}

// waitStarted is waitRestarted; with firstFailure, an engine that fails
// to start ends the wait at once, before the fleet starts it again: the
// model's requests are waiting for it in the gateway's queue (in place),
// and the park the failures lead to would refuse them.
func (s *Server) waitStarted(ctx context.Context, model string, since time.Time, firstFailure bool) error {
	deadline := time.Now().Add(s.deps.ReadyTimeout)
	tick := time.NewTicker(s.deps.Poll)
	defer tick.Stop()
	for {
		if _, ok := s.readySince(model, since); ok {
			return nil
		}
		if r, ok := s.failedSince(model, since); ok && firstFailure {
			return sentencef("its engine failed to start: %s", or(r.LastError, r.Detail))
		}
		// The catalog's Add waits for the fleet to look at the entry
		// (fleet.NotifyingCatalog), so a park seen here is of this entry,
		// not of the one it replaced.
		if h, ok := s.health(model); ok && h.Parked {
			return sentencef("they failed to start %s and are parked: %s", words.Plural(h.Failures, "once", fmt.Sprintf("%d times", h.Failures)), h.Reason)
		}
		if time.Now().After(deadline) {
			return sentencef("none was ready after %s", s.deps.ReadyTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func isNotFound(err error) bool {
	e, ok := operr.As(err)
	return ok && e.Kind == operr.NotFound
}

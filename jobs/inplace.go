package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"modelserve/catalog"
	"modelserve/internal/canary"
	"modelserve/internal/fleet"
	"modelserve/internal/hf"
	"modelserve/internal/operr"
	"modelserve/internal/words"
)

// An update, or a version served again (a restore), with no room beside
// its model was refused: the most common deployment, one machine whose
// memory holds the model once, could not update at all. In place, the
// version replaces the model's replica instead: the model's entry takes
// the version, so the fleet drains the replica (the requests on it are
// answered), stops it and starts one of the version in its room, while the
// gateway holds the model's new requests in its queue; they are answered
// by whichever version serves. An update's eval suite runs on the version
// before it goes and on the new one once it serves, and the verdict keeps
// the new version or brings the one before back the same way. A restore
// keeps the version asked for, or brings the one before back when it does
// not start. The version's own entry (the canary's) is kept without
// replicas, for its version's record and for the end of its trial (undo).
//
// A model that keeps several replicas is not left with none: one of them
// gives its room to the new version (the model scaled down by one, the
// version's entry up by one), which is tried there as a canary beside the
// others, taking its replica's share of the requests; judged, it is
// promoted as any canary is (its model's other replicas restart on it
// while it takes every request) and the model scales back, or rolled back
// and the model scales back on the version it runs.
//
// A model whose update settings say in_place: false is refused as before
// (Request.InPlace).

// mayReplace is whether a version of model with no room beside it may
// replace its replica in place: yes unless its update settings say no.
func (s *Server) mayReplace(ctx context.Context, model string) (bool, error) {
	if s.deps.Updates == nil {
		return true, nil
	}
	return s.deps.Updates.InPlace(ctx, model)
}

// loadsJudged is how many of a model's newest measured loads its reload
// is judged by: the longest of them, as a client waits the longest.
const loadsJudged = 5

// startsRead bounds the fleet's start history read for them.
const startsRead = 500

// ReloadCost says what replacing model's replica in place costs its
// requests, from the fleet's measured loads of it: "requests wait about
// 4 s while chatty's replica reloads". The job's steps and the update
// page say it.
func (s *Server) ReloadCost(ctx context.Context, model string) string {
	d, ok := s.loadTime(ctx, model)
	if !ok {
		return fmt.Sprintf("requests wait while %s's replica reloads (no load of it has been measured yet)", model)
	}
	return fmt.Sprintf("requests wait about %s while %s's replica reloads", words.Span(max(d, time.Second)), model)
}

// loadTime is the longest of model's newest measured loads, from its
// engine's start to its replica ready; false when none was measured.
func (s *Server) loadTime(ctx context.Context, model string) (time.Duration, bool) {
	if s.deps.Starts == nil {
		return 0, false
	}
	starts, err := s.deps.Starts.Starts(ctx, startsRead)
	if err != nil {
		s.deps.Log.Warn("reading the fleet's engine starts to say how long a reload takes", "model", model, "err", err)
		return 0, false
	}
	var longest time.Duration
	n := 0
	for _, st := range starts {
		if st.Model != model || st.ReadyAt.Before(st.Started) {
			continue
		}
		longest = max(longest, st.ReadyAt.Sub(st.Started))
		if n++; n == loadsJudged {
			break
		}
	}
	return longest, n > 0
}

// inPlace serves the version p fetched and checked in place of its
// model's replica, and judges it (an update) or keeps it (a restore).
func (s *Server) inPlace(ctx context.Context, l *live, p *pipeline) error {
	m, err := s.deps.Catalog.Get(ctx, p.req.CanaryOf)
	if err != nil {
		return failedAt(StepPlacement, err)
	}
	back := l.takeBack()
	if back.Scaling != nil || m.Scaling.Min > 1 {
		// Carrying on after a restart, the model is scaled down by one
		// already: its scaling before is the one kept with the job.
		if back.Scaling != nil {
			m.Scaling = *back.Scaling
		}
		return s.inPlaceOfOne(ctx, l, p, m)
	}
	// Carrying on after a restart during the replacement: the model runs
	// the version already, and the job kept the entry before it and the
	// suite's result on it (takeBack), unless it began before they were
	// kept with the job.
	resumed := m.Origin != nil && m.Origin.Revision == p.repo.Commit
	var cur canary.Eval
	suite := false
	switch {
	case p.req.RestoreOf != 0:
	case resumed && back.Entry != nil:
		if back.Baseline != nil {
			cur, suite = *back.Baseline, true
		}
	case resumed:
		s.step(l, StepEval, Skipped, fmt.Sprintf("%s runs %s already: modelserve restarted while its replica was replaced, "+
			"and the version before is not kept to judge it against", m.Name, hf.Short(p.repo.Commit)))
	default:
		var err error
		if cur, suite, err = s.baseline(ctx, l, p); err != nil {
			return err
		}
	}
	if !resumed {
		// Kept with the job before the entry changes: a restart from here
		// on still judges in place, and puts the model back.
		s.setTakeBack(l, func(b *takeBack) {
			b.Entry, b.Baseline = &m, nil
			if suite {
				b.Baseline = &cur
			}
		})
	}
	// 6. Placement: the model's replica replaced.
	rep, err := s.replace(ctx, l, p, resumed)
	if err != nil {
		return failedAt(StepPlacement, notServedAgain(p.req, err))
	}
	if err := s.boundary(l); err != nil {
		return err
	}
	// 7. The smoke test, of the model, which is the version now.
	if err := s.smokeStep(ctx, l, p, p.req.CanaryOf, rep); err != nil {
		return err
	}
	if p.req.RestoreOf != 0 {
		// 8. A restore: kept, as asked.
		return s.keepRestored(ctx, l, p)
	}
	// 8. An update: judged on its suite, then kept or brought back.
	return s.judgeInPlace(ctx, l, p, cur, suite)
}

// inPlaceOfOne tries the version p fetched in the room of one of the
// several replicas of its model m, then judges it as a canary.
func (s *Server) inPlaceOfOne(ctx context.Context, l *live, p *pipeline, m catalog.Model) error {
	of, name, n := m.Name, p.name, m.Scaling.Min
	s.step(l, StepPlacement, Running, fmt.Sprintf("one of %s's %d replicas gives its room to %s, which is judged there before the rest; %s meanwhile",
		of, n, hf.Short(p.repo.Commit), words.Plural(n-1, "the other serves", fmt.Sprintf("the other %d serve", n-1))))
	// Kept with the job before the model scales down (m's scaling is the
	// kept one when carrying on after a restart).
	s.setTakeBack(l, func(b *takeBack) { b.Scaling = &m.Scaling })
	if err := s.deps.Catalog.SetScaling(ctx, of, n-1, max(m.Scaling.Max-1, n-1), nil); err != nil {
		return failedAt(StepPlacement, err)
	}
	if err := s.deps.Catalog.SetScaling(ctx, name, 1, 1, nil); err != nil {
		return failedAt(StepPlacement, err)
	}
	rep, err := s.waitReady(ctx, l, name, p.hardware, p.req)
	if err != nil {
		return failedAt(StepPlacement, err)
	}
	if err := s.boundary(l); err != nil {
		return err
	}
	if err := s.smokeStep(ctx, l, p, name, rep); err != nil {
		return err
	}
	// Its replica's share of the requests: as many as each of the
	// model's.
	p.req.Share = 1 / float64(n)
	if p.req.RestoreOf != 0 {
		err = s.serveAgain(ctx, l, p)
	} else {
		err = s.trial(ctx, l, p)
	}
	if err != nil {
		return err
	}
	// Promoted: the model takes back the room its version held.
	s.setTakeBack(l, func(b *takeBack) { b.Scaling = nil })
	return s.deps.Catalog.SetScaling(ctx, of, m.Scaling.Min, m.Scaling.Max, nil)
}

// baseline runs the model's eval suite on the version it serves, before
// its replica is replaced: what the new version is judged against.
// suite is false when there is none to run.
func (s *Server) baseline(ctx context.Context, l *live, p *pipeline) (cur canary.Eval, suite bool, err error) {
	of := p.req.CanaryOf
	if s.deps.Evals == nil {
		s.step(l, StepEval, Skipped, "this modelserve runs no eval suites")
		return canary.Eval{}, false, nil
	}
	s.step(l, StepEval, Running, fmt.Sprintf("running %s's eval suite on the version it serves, before its replica is replaced", of))
	cur, ok, err := s.deps.Evals.Run(ctx, of, of)
	if err != nil {
		return canary.Eval{}, false, failedAt(StepEval, err)
	}
	if !ok {
		s.step(l, StepEval, Skipped, fmt.Sprintf("%s has no eval suite: PUT /api/v1/catalog/%s/evals gives it one, which updates are then judged by", of, of))
	}
	return cur, ok, nil
}

// replace gives the model's entry p's version, waits for its replica to
// serve it, and returns that replica; resumed, the entry has the version
// already. A version whose replica does not start brings the one before
// back the same way, and says so.
func (s *Server) replace(ctx context.Context, l *live, p *pipeline, resumed bool) (fleet.Replica, error) {
	of, at := p.req.CanaryOf, hf.Short(p.repo.Commit)
	s.step(l, StepPlacement, Running, fmt.Sprintf("replacing %s's replica in place with %s: %s", of, at, s.ReloadCost(ctx, of)))
	var before catalog.Model
	var changed time.Time // resumed: any replica of the entry
	if !resumed {
		var err error
		if before, changed, err = s.takeVersion(ctx, of, p.name); err != nil {
			return fleet.Replica{}, err
		}
		// Until the job ends kept or brought back, its end (undo) puts
		// this entry back.
		s.setTakeBack(l, func(b *takeBack) { b.Entry = &before })
	}
	if err := s.waitStarted(ctx, of, changed, true); err != nil {
		if ctx.Err() != nil {
			return fleet.Replica{}, err
		}
		why := fmt.Sprintf("its replica did not start in place of %s's: %s", of, err)
		if err := s.goBack(ctx, l, StepPlacement, why); err != nil {
			return fleet.Replica{}, err
		}
		if p.req.RestoreOf != 0 {
			return fleet.Replica{}, sentencef("%s", why) // said of the restore: notServedAgain
		}
		return fleet.Replica{}, sentencef("%s; %s serves %s again", why, of, hf.Short(before.Origin.Revision))
	}
	rep, _ := s.readySince(of, changed)
	s.step(l, StepPlacement, Done, fmt.Sprintf("%s ready on %s at %s, serving %s in place of the version before; %s's requests waited for it in the queue",
		rep.ID, rep.Node, rep.Endpoint, at, of))
	return rep, nil
}

// goBack brings the model back to the entry it had before an in-place
// replacement (takeBack), under step, because of why. It returns nil
// once the version before serves again, and else the sentence of the
// ending: not starting either, or not kept to go back to.
func (s *Server) goBack(ctx context.Context, l *live, step, why string) error {
	was := l.takeBack().Entry
	if was == nil {
		// Resumed after the replacement: the entry before it is gone.
		return sentencef("%s; the replacement began before modelserve restarted, so the entry before it is not kept to go back to", why)
	}
	of, old := was.Name, hf.Short(was.Origin.Revision)
	s.step(l, step, Running, fmt.Sprintf("%s; bringing %s back to %s the same way, its requests waiting in the queue", why, of, old))
	err := s.putBack(ctx, *was)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if _, ok := operr.Sentence(err); err != nil && !ok {
		return err
	}
	s.setTakeBack(l, func(b *takeBack) { b.Entry = nil })
	if err != nil {
		return sentencef("%s; %s is back on %s, which does not start either: %s", why, of, old, err)
	}
	return nil
}

// judgeInPlace runs the model's suite on the new version now serving in
// place, and keeps it or brings the version before back.
func (s *Server) judgeInPlace(ctx context.Context, l *live, p *pipeline, cur canary.Eval, suite bool) error {
	of, name, at := p.req.CanaryOf, p.name, hf.Short(p.repo.Commit)
	v, why := canary.Promote, "judged in place, with no suite to run"
	if suite {
		s.step(l, StepEval, Running, fmt.Sprintf("running %s's eval suite on %s, now serving in place", of, at))
		now, _, err := s.deps.Evals.Run(ctx, of, of)
		if err != nil {
			return failedAt(StepEval, err)
		}
		v, why = canary.JudgeEval(cur, now)
		why += ", in place"
		state := Done
		if v == canary.RollBack {
			state = RolledBack
		}
		s.step(l, StepEval, state, why)
	}
	s.step(l, StepCanary, Skipped, fmt.Sprintf("in place: %s takes every request of %s, with no version beside it to measure against", at, of))
	select {
	case d := <-l.decisions:
		// An operator's word before the verdict's own.
		did := "kept"
		if d.verdict == canary.RollBack {
			did = "rolled back"
		}
		v, why = d.verdict, fmt.Sprintf("%s by %s", did, or(d.by, "an operator"))
	default:
	}
	if v == canary.RollBack {
		was := l.takeBack().Entry
		if err := s.goBack(ctx, l, StepVerdict, "rolling "+name+" back: "+why); err != nil {
			if ctx.Err() != nil {
				return err
			}
			return failedAt(StepVerdict, &rolledBack{sentencef("%s rolled back in place: %s", name, err)})
		}
		return failedAt(StepVerdict, &rolledBack{sentencef("%s rolled back in place, %s serving %s again: %s", name, of, hf.Short(was.Origin.Revision), why)})
	}
	s.step(l, StepVerdict, Running, "keeping "+name+": "+why)
	if err := s.promoted(ctx, p); err != nil {
		return failedAt(StepVerdict, err)
	}
	s.setTakeBack(l, func(b *takeBack) { b.Entry = nil })
	s.step(l, StepVerdict, Done, fmt.Sprintf("%s promoted in place: %s now serves %s; %s", name, of, at, why))
	return nil
}

// keepRestored ends a restore whose version serves in place.
func (s *Server) keepRestored(ctx context.Context, l *live, p *pipeline) error {
	of, at := p.req.CanaryOf, hf.Short(p.repo.Commit)
	was := "the version before"
	if b := l.takeBack().Entry; b != nil {
		was = hf.Short(b.Origin.Revision)
	}
	if err := s.promoted(ctx, p); err != nil {
		return failedAt(StepRestore, err)
	}
	s.setTakeBack(l, func(b *takeBack) { b.Entry = nil })
	s.step(l, StepRestore, Done, fmt.Sprintf("%s serves %s again, in place; %s is retired, and can be restored the same way", of, at, was))
	return nil
}

// readySince is a ready replica of model started since, if any.
func (s *Server) readySince(model string, since time.Time) (fleet.Replica, bool) {
	return s.replicaSince(model, since, func(r fleet.Replica) bool { return r.State == fleet.Ready })
}

// failedSince is a replica of model started since whose engine ended
// without being asked to, if any.
func (s *Server) failedSince(model string, since time.Time) (fleet.Replica, bool) {
	return s.replicaSince(model, since, func(r fleet.Replica) bool { return r.Failures > 0 })
}

// replicaSince is a replica of model started since that is as asked, if
// any.
func (s *Server) replicaSince(model string, since time.Time, is func(fleet.Replica) bool) (fleet.Replica, bool) {
	rs := s.deps.Fleet.Replicas()
	i := slices.IndexFunc(rs, func(r fleet.Replica) bool { return r.Model == model && !r.Started.Before(since) && is(r) })
	if i < 0 {
		return fleet.Replica{}, false
	}
	return rs[i], true
}

// takeBack is what an in-place trial changed of its model, for its end
// to take back if the trial does not keep the version. It is saved with
// the job (its take_back column): a trial resumed after a restart goes on
// judging in place, and its end still puts the model back as it was.
type takeBack struct {
	// Entry is the model's entry before its replica was replaced, until
	// the version is kept or the entry brought back; nil when none was.
	Entry *catalog.Model `json:"entry,omitempty"`
	// Scaling is the model's scaling before one of its several replicas
	// gave its room to the version, until the model takes it back.
	Scaling *catalog.Scaling `json:"scaling,omitempty"`
	// Baseline is the model's eval suite's result on the version before,
	// which the version is judged against in place; nil when it has no
	// suite (or none was run yet).
	Baseline *canary.Eval `json:"baseline,omitempty"`
}

// encode is how the job stores it: "" for nothing to take back.
func (b takeBack) encode() (string, error) {
	if b == (takeBack{}) {
		return "", nil
	}
	out, err := json.Marshal(b)
	return string(out), err
}

// decodeTakeBack reads what encode stored.
func decodeTakeBack(stored string) (takeBack, error) {
	var b takeBack
	if stored == "" {
		return b, nil
	}
	err := json.Unmarshal([]byte(stored), &b)
	return b, err
}

// takeBack is what the job's in-place trial has yet to take back.
func (l *live) takeBack() takeBack {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.job.back
}

// setTakeBack changes it, and saves it with the job before returning:
// what a trial changes of its model is recorded before it changes it.
func (s *Server) setTakeBack(l *live, change func(*takeBack)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	change(&l.job.back)
	s.publishLocked(l, -1)
}

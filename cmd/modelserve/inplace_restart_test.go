package main

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hf"
	"modelserve/internal/testkit"
	"modelserve/internal/updates"
	"modelserve/jobs"
)

// restartMidJob stops modelserve once the job's step is as ready says,
// and starts it again on the same data folder: the job is resumed there.
func (w *updateWorld) restartMidJob(t *testing.T, id, what string, ready func(jobs.Job) bool) {
	t.Helper()
	var job jobs.Job
	testkit.WaitFor(t, 3*time.Minute, what, func() (bool, string) {
		w.s.do("GET", "/api/v1/jobs/"+id, nil, &job)
		return ready(job) || job.Ended(), jobSaw(job)
	})
	if job.Ended() {
		t.Fatalf("the update ended before modelserve could be stopped %s: %s %q\n%+v", what, job.State, job.Error, job.Steps)
	}
	w.s.stop()
	w.s = startAPI(t, w.cfg)
}

// TestAnInPlaceTrialResumedAfterARestartStillGoesBack: modelserve stops
// just after chatty's replica was replaced in place by its update, whose
// answers fail chatty's suite; started again on the same data, the job
// carries on judging in place, against the suite's result on the version
// before, and rolls the update back: chatty serves its old version again,
// with its one replica.
func TestAnInPlaceTrialResumedAfterARestartStillGoesBack(t *testing.T) {
	w := newRoomForOne(t)
	before := w.answer(t)
	// Cases that hold the old version's answer, enough of them that the
	// suite is still to run when modelserve stops.
	var cases []map[string]any
	for i := range 20 {
		cases = append(cases, map[string]any{"name": "as it answers " + strconv.Itoa(i), "prompt": "Say hello.", "max_tokens": 8,
			"expect": map[string]any{"exact": "placeholder"}})
	}
	suite := map[string]any{"cases": cases[:1]}
	w.s.do("PUT", "/api/v1/catalog/chatty/evals", suite, nil)
	first := w.evalRun(t)
	if len(first.Results) != 1 || first.Results[0].Answer == "" {
		t.Fatalf("the first run: %+v", first)
	}
	for _, c := range cases {
		c["expect"] = map[string]any{"exact": first.Results[0].Answer}
	}
	if code := w.s.do("PUT", "/api/v1/catalog/chatty/evals", map[string]any{"cases": cases}, nil); code != http.StatusOK {
		t.Fatalf("PUT the suite: %d", code)
	}

	var job jobs.Job
	if code := w.s.do("POST", "/api/v1/catalog/chatty/update", nil, &job); code != http.StatusAccepted {
		t.Fatalf("update: %d %+v", code, job)
	}
	w.restartMidJob(t, job.ID, "chatty's replica replaced in place", func(j jobs.Job) bool {
		st, _ := j.Step(jobs.StepPlacement)
		return st.State == jobs.Done
	})
	w.runsCommit(t, "when modelserve starts again mid-trial", w.moved)

	seen := w.s.watch(job.ID, 4*time.Minute)
	last := seen[len(seen)-1]
	for _, st := range last.Steps {
		t.Logf("%s %s: %s", st.Name, st.State, st.Detail)
	}
	const why = "its eval passed 0 of 20 cases against 20 of 20 for the current version, in place"
	if last.State != jobs.Failed || !strings.Contains(last.Error, why) || !strings.Contains(last.Error, "chatty serving "+hf.Short(w.served)+" again") {
		t.Fatalf("the resumed update ended %s: %q\n%+v", last.State, last.Error, last.Steps)
	}
	if decided, ok := last.RolledBack(); !ok || decided.Name != jobs.StepEval {
		t.Errorf("the resumed update was decided by %+v (%v); want rolled back by its eval", decided, ok)
	}
	w.runsCommit(t, "after its resumed trial was rolled back", w.served)
	testkit.WaitFor(t, time.Minute, "chatty's one replica on its old version", func() (bool, string) {
		return w.s.settled("chatty", 1), "chatty's replicas"
	})
	if after := w.answer(t); after != before {
		t.Errorf("chatty answers %q after the resumed trial was rolled back, want its old version's %q", after, before)
	}
	w.canaryGone(t, why)
}

// TestASeveralReplicaInPlaceTrialResumedAfterARestart: one of chatty's two
// replicas gave its room to the update, and modelserve stops during the
// trial; started again on the same data, the job carries it on in that
// room (its share as one of two replicas), and the operator's roll-back
// then brings chatty back to two replicas of its old version.
func TestASeveralReplicaInPlaceTrialResumedAfterARestart(t *testing.T) {
	w := newUpdateWorldServing(t, testPolicy(20), ggufgen.Spec{Vocab: otherWords}, updates.PolicyManual, map[string]any{"replicas": 2},
		func(c *config) { c.LocalMemory = 2*swapBudget - 170e6 })
	testkit.WaitFor(t, time.Minute, "chatty's two replicas ready", func() (bool, string) {
		return w.s.settled("chatty", 2), "chatty's replicas"
	})
	job := w.startUpdate(t)
	if job.Ended() {
		t.Fatalf("the update ended before its trial: %s %q\n%+v", job.State, job.Error, job.Steps)
	}
	w.s.stop()
	restarted := time.Now()
	w.s = startAPI(t, w.cfg)
	testkit.WaitFor(t, 2*time.Minute, "the resumed trial on its share again", func() (bool, string) {
		w.s.do("GET", "/api/v1/jobs/"+job.ID, nil, &job)
		st, _ := job.Step(jobs.StepCanary)
		return st.State == jobs.Running && st.At.After(restarted) || job.Ended(), jobSaw(job)
	})
	if _, name, share := w.versions(t); job.Ended() || name != catalog.CanaryName("chatty", w.moved) || share != 0.5 {
		t.Fatalf("after the restart: job %s (%s), the version on trial %q at %v; want it on its replica's half", job.State, job.Error, name, share)
	}
	w.chat(t, 10)
	if code := w.s.do("POST", "/api/v1/catalog/chatty/rollback", nil, &job); code != http.StatusOK {
		t.Fatalf("rollback: %d %+v", code, job)
	}
	if seen := w.s.watch(job.ID, time.Minute); seen[len(seen)-1].State != jobs.Failed {
		t.Fatalf("the rolled-back update ended %s: %q", seen[len(seen)-1].State, seen[len(seen)-1].Error)
	}
	w.runsCommit(t, "after its resumed trial was rolled back", w.served)
	var m catalog.Model
	if w.s.do("GET", "/api/v1/catalog/chatty", nil, &m); m.Scaling.Min != 2 || m.Scaling.Max != 2 {
		t.Errorf("chatty scales %+v after its resumed trial was rolled back, want 2 replicas as before", m.Scaling)
	}
	testkit.WaitFor(t, 2*time.Minute, "chatty back to two replicas", func() (bool, string) {
		return w.s.settled("chatty", 2), "chatty's replicas"
	})
}

package main

import (
	"net/http"
	"path/filepath"
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

// otherWords is a vocabulary the update's weights speak in place of the
// tiny model's own: the version that answers is heard in its answer.
var otherWords = []string{"zebra", "quartz", "nimbus", "fjord", "glyph", "oxbow"}

// newRoomForOne is an update world on a machine whose memory
// (--local-memory, swapBudget) holds chatty once and never twice, its
// branch moved to weights that speak otherWords.
func newRoomForOne(t testing.TB) *updateWorld {
	t.Helper()
	return newUpdateWorldServing(t, testPolicy(20), ggufgen.Spec{Vocab: otherWords}, updates.PolicyManual, nil,
		func(c *config) { c.LocalMemory = swapBudget })
}

// answer is chatty's answer to one request asked the same way each time
// (temperature 0, a seed): which version serves is heard in it.
func (w *updateWorld) answer(t *testing.T) string {
	t.Helper()
	var out struct {
		Choices []struct{ Message struct{ Content string } }
	}
	body := map[string]any{"model": "chatty", "max_tokens": 8, "temperature": 0, "seed": 42,
		"messages": []map[string]string{{"role": "user", "content": "Say hello."}}}
	if code := w.s.do("POST", "/v1/chat/completions", body, &out); code != http.StatusOK || len(out.Choices) != 1 {
		t.Fatalf("asking chatty: %d %+v", code, out)
	}
	return out.Choices[0].Message.Content
}

// inPlace runs fn while four clients stream chatty's requests through the
// gateway, and fails the test for any of them that was not answered.
func (w *updateWorld) inPlace(t *testing.T, what string, fn func() jobs.Job) jobs.Job {
	t.Helper()
	ld := startLoad(w.s.base, w.s.token, "chatty", 4)
	job := fn()
	time.Sleep(time.Second) // requests after the job's end, on the version it left serving
	sent, lost := ld.end()
	t.Logf("%s: %d requests through it, %d failed", what, sent, len(lost))
	if sent == 0 || len(lost) > 0 {
		t.Errorf("%d of %d requests failed %s: %v", len(lost), sent, what, lost)
	}
	return job
}

// updateInPlace asks for chatty's update and waits for its job to end.
func (w *updateWorld) updateInPlace(t testing.TB) jobs.Job {
	t.Helper()
	var job jobs.Job
	if code := w.s.do("POST", "/api/v1/catalog/chatty/update", nil, &job); code != http.StatusAccepted {
		t.Fatalf("update: %d %+v", code, job)
	}
	seen := w.s.watch(job.ID, 4*time.Minute)
	return seen[len(seen)-1]
}

// runsCommit fails the test unless chatty's entry runs commit.
func (w *updateWorld) runsCommit(t *testing.T, when, commit string) {
	t.Helper()
	var m catalog.Model
	if w.s.do("GET", "/api/v1/catalog/chatty", nil, &m); m.Origin == nil || m.Origin.Revision != commit || m.Canary != nil {
		t.Errorf("chatty %s runs %+v, want %s", when, m.Origin, hf.Short(commit))
	}
}

// saysInPlace fails the test unless the job's plan step says the version
// runs in place and what that costs, from chatty's measured load.
func saysInPlace(t *testing.T, job jobs.Job) {
	t.Helper()
	pl, _ := job.Step(jobs.StepPlan)
	if !strings.Contains(pl.Detail, "there is no room beside chatty") ||
		!strings.Contains(pl.Detail, "so it is served in place of chatty's replica: requests wait about ") ||
		!strings.Contains(pl.Detail, " while chatty's replica reloads") {
		t.Errorf("the plan step: %q; want it to say the version runs in place, and the wait", pl.Detail)
	}
	if st, _ := job.Step(jobs.StepPlacement); st.State != jobs.Done || !strings.Contains(st.Detail, "in place of the version before") {
		t.Errorf("the placement step: %+v", st)
	}
}

// TestAnUpdateWithNoRoomBesideIsTriedInPlace: chatty's machine holds it
// once, so its update cannot run beside it; it replaces chatty's replica
// instead, while clients stream: none of their requests fails (they wait
// in the gateway's queue while the replica reloads), the suite runs on
// both versions, and the new version is promoted: chatty answers in its
// words, its old version is retired, and nothing of the trial is left.
func TestAnUpdateWithNoRoomBesideIsTriedInPlace(t *testing.T) {
	w := newRoomForOne(t)
	suite := map[string]any{"cases": []map[string]any{{"name": "any", "prompt": "Say hello.", "max_tokens": 4, "expect": map[string]any{"regex": "(?s).*"}}}}
	if code := w.s.do("PUT", "/api/v1/catalog/chatty/evals", suite, nil); code != http.StatusOK {
		t.Fatalf("PUT the suite: %d", code)
	}
	before := w.answer(t)
	last := w.inPlace(t, "while chatty's update was tried in place", func() jobs.Job { return w.updateInPlace(t) })
	if last.State != jobs.Done {
		t.Fatalf("the update ended %s: %q\n%+v", last.State, last.Error, last.Steps)
	}
	for _, st := range last.Steps {
		t.Logf("%s %s: %s", st.Name, st.State, st.Detail)
	}
	saysInPlace(t, last)
	if e, _ := last.Step(jobs.StepEval); e.State != jobs.Done || !strings.Contains(e.Detail, "its eval passed 1 of 1 cases against 1 of 1 for the current version, in place") {
		t.Errorf("the eval step: %+v", e)
	}
	if c, _ := last.Step(jobs.StepCanary); c.State != jobs.Skipped || !strings.Contains(c.Detail, "in place:") {
		t.Errorf("the canary step: %+v; want it skipped, saying the trial ran in place", c)
	}
	if v, _ := last.Step(jobs.StepVerdict); v.State != jobs.Done || !strings.Contains(v.Detail, "promoted in place: chatty now serves "+hf.Short(w.moved)) {
		t.Errorf("the verdict: %+v", v)
	}
	w.runsCommit(t, "after its update in place", w.moved)
	if after := w.answer(t); after == before {
		t.Errorf("chatty answers %q after its update, as before it; want the new version's words", after)
	}
	if v := w.version(t, w.moved); v.State != catalog.VersionCurrent {
		t.Errorf("the new version: %+v, want current", v)
	}
	if v := w.version(t, w.served); v.State != catalog.VersionRetired {
		t.Errorf("the version before: %+v, want retired", v)
	}
	var up updates.Update
	if w.s.do("GET", "/api/v1/updates/"+strconv.FormatInt(w.update.ID, 10), nil, &up); up.State != updates.StatePromoted {
		t.Errorf("the update is %s, want promoted", up.State)
	}
	if code := w.s.do("GET", "/api/v1/catalog/"+catalog.CanaryName("chatty", w.moved), nil, nil); code != http.StatusNotFound {
		t.Errorf("the trial's entry after the promotion: %d, want gone", code)
	}
}

// TestAnInPlaceUpdateItsEvalFailsGoesBack: chatty's suite holds its own
// answer; the update, tried in place, answers in other words and fails
// it, so chatty's replica is brought back to the old version the same
// way: the job ends rolled back by its eval, chatty answers as before,
// and no client's request failed on the way there and back.
func TestAnInPlaceUpdateItsEvalFailsGoesBack(t *testing.T) {
	w := newRoomForOne(t)
	before := w.answer(t)
	suite := map[string]any{"cases": []map[string]any{{"name": "as it answers", "prompt": "Say hello.", "max_tokens": 8,
		"expect": map[string]any{"exact": "nothing it says"}}}}
	if code := w.s.do("PUT", "/api/v1/catalog/chatty/evals", suite, nil); code != http.StatusOK {
		t.Fatalf("PUT the suite: %d", code)
	}
	first := w.evalRun(t)
	if len(first.Results) != 1 || first.Results[0].Answer == "" {
		t.Fatalf("the first run: %+v", first)
	}
	suite["cases"].([]map[string]any)[0]["expect"] = map[string]any{"exact": first.Results[0].Answer}
	w.s.do("PUT", "/api/v1/catalog/chatty/evals", suite, nil)
	if run := w.evalRun(t); run.Passed != 1 {
		t.Fatalf("chatty fails a case holding its own answer %q: %+v", first.Results[0].Answer, run.Results)
	}

	last := w.inPlace(t, "while chatty's update was tried in place and brought back", func() jobs.Job { return w.updateInPlace(t) })
	const why = "its eval passed 0 of 1 cases against 1 of 1 for the current version, in place"
	if last.State != jobs.Failed || !strings.Contains(last.Error, why) || !strings.Contains(last.Error, "chatty serving "+hf.Short(w.served)+" again") {
		t.Fatalf("the update ended %s: %q\n%+v", last.State, last.Error, last.Steps)
	}
	t.Logf("rolled back: %s", last.Error)
	saysInPlace(t, last)
	decided, ok := last.RolledBack()
	if !ok || decided.Name != jobs.StepEval || last.EndStep() != jobs.StepEval {
		t.Errorf("the update ended at %q, decided by %+v (%v); want rolled back by its eval", last.EndStep(), decided, ok)
	}
	if after := w.answer(t); after != before {
		t.Errorf("chatty answers %q after the roll-back, want its old version's %q", after, before)
	}
	w.canaryGone(t, why)
}

// TestAVersionIsRestoredInPlace: after chatty's update was promoted in
// place, a restore of its old version whose engine cannot start (its
// file on the mirror was damaged) ends with the sentence of why, and
// chatty serves on at the new version; once the file is whole again, the
// restore serves the old version in place. Clients stream throughout,
// and not one of their requests fails.
func TestAVersionIsRestoredInPlace(t *testing.T) {
	w := newRoomForOne(t)
	old := w.answer(t)
	if last := w.updateInPlace(t); last.State != jobs.Done {
		t.Fatalf("the update ended %s: %q\n%+v", last.State, last.Error, last.Steps)
	}
	updated := w.answer(t)
	was := w.version(t, w.served)

	file := filepath.Join(w.cfg.Data, "mirror", "chatty", hf.Short(w.served), updFile)
	whole := unknownTokenizer(t, file)
	failed := w.inPlace(t, "while a version that cannot start was restored in place", func() jobs.Job { return w.restore(t, was.ID) })
	if failed.State != jobs.Failed || !strings.HasPrefix(failed.Error, "chatty at "+hf.Short(w.served)+" was not served again: ") ||
		!strings.Contains(failed.Error, "its engine failed to start: ") || !strings.Contains(failed.Error, "unknown tokenizer") ||
		!strings.HasSuffix(failed.Error, "chatty serves on as it did") {
		t.Fatalf("the restore of a version that cannot start ended %s: %q\n%+v", failed.State, failed.Error, failed.Steps)
	}
	t.Logf("not served again: %s", failed.Error)
	if st, _ := failed.Step(jobs.StepPlacement); st.State != jobs.Failed {
		t.Errorf("the placement step: %+v, want it failed", st)
	}
	w.runsCommit(t, "after the failed restore", w.moved)
	if now := w.answer(t); now != updated {
		t.Errorf("chatty answers %q after the failed restore, want the current version's %q", now, updated)
	}
	if v := w.version(t, w.served); v.State != catalog.VersionRetired || !strings.Contains(v.Reason, failed.ID) {
		t.Errorf("the version that did not start again: %+v; want retired, naming the job that tried", v)
	}

	replace(t, file, whole)
	done := w.inPlace(t, "while the old version was restored in place", func() jobs.Job { return w.restore(t, was.ID) })
	if done.State != jobs.Done {
		t.Fatalf("the restore ended %s: %q\n%+v", done.State, done.Error, done.Steps)
	}
	saysInPlace(t, done)
	if st, _ := done.Step(jobs.StepRestore); st.State != jobs.Done || !strings.Contains(st.Detail, "chatty serves "+hf.Short(w.served)+" again, in place") {
		t.Errorf("the restore step: %+v", st)
	}
	w.runsCommit(t, "after the restore", w.served)
	if now := w.answer(t); now != old {
		t.Errorf("chatty answers %q after the restore, want its old version's %q", now, old)
	}
	if v := w.version(t, w.moved); v.State != catalog.VersionRetired {
		t.Errorf("the version it replaced: %+v, want retired", v)
	}
}

// TestAModelThatOptsOutOfInPlaceIsRefused: chatty's update settings say
// in_place: false, so an update with no room beside it is refused at its
// plan step, as before there was an in-place trial, and chatty serves on.
func TestAModelThatOptsOutOfInPlaceIsRefused(t *testing.T) {
	w := newRoomForOne(t)
	var st updates.Status
	if code := w.s.do("PUT", "/api/v1/catalog/chatty/updates", map[string]any{"in_place": false}, &st); code != http.StatusOK || st.InPlace {
		t.Fatalf("turning in place off: %d %+v", code, st)
	}
	if w.s.do("GET", "/api/v1/catalog/chatty/updates", nil, &st); st.InPlace {
		t.Errorf("chatty's update settings after turning in place off: %+v", st)
	}
	last := w.updateInPlace(t)
	const why = "there is no room beside chatty for its canary"
	if last.State != jobs.Failed || !strings.HasPrefix(last.Error, why) || !strings.Contains(last.Error, "serve the new commit as chatty in its place, without a trial") {
		t.Fatalf("the update ended %s: %q\n%+v", last.State, last.Error, last.Steps)
	}
	if pl, _ := last.Step(jobs.StepPlan); pl.State != jobs.Failed {
		t.Errorf("the plan step: %+v, want it failed", pl)
	}
	w.trialEnded(t, why, false)
}

// TestOneOfSeveralReplicasGivesItsRoomFirst: chatty keeps two replicas on
// a machine with room for two copies and never three. Its update takes
// the room of one of them and is judged there, taking that replica's
// share of the requests, while the other serves on; promoted, chatty's
// other replica restarts on it and chatty is back to two, every one on
// the new version. Clients stream throughout, and none of their requests
// fails.
func TestOneOfSeveralReplicasGivesItsRoomFirst(t *testing.T) {
	w := newUpdateWorldServing(t, testPolicy(20), ggufgen.Spec{Vocab: otherWords}, updates.PolicyManual, map[string]any{"replicas": 2},
		func(c *config) { c.LocalMemory = 2*swapBudget - 170e6 })
	testkit.WaitFor(t, time.Minute, "chatty's two replicas ready", func() (bool, string) {
		return w.s.settled("chatty", 2), "chatty's replicas"
	})
	last := w.inPlace(t, "while one of chatty's two replicas gave its room to its update", func() jobs.Job {
		job := w.startUpdate(t)
		if job.Ended() {
			t.Fatalf("the update ended before its trial: %s %q\n%+v", job.State, job.Error, job.Steps)
		}
		// Judged beside the one replica of chatty left.
		if name := catalog.CanaryName("chatty", w.moved); !w.s.settled(name, 1) || !w.s.settled("chatty", 1) {
			t.Errorf("while on trial: chatty's replicas %+v, the update's %+v; want one of each", w.s.replicas("chatty"), w.s.replicas(name))
		}
		if _, _, share := w.versions(t); share != 0.5 {
			t.Errorf("the update takes %v of chatty's requests, want its replica's half", share)
		}
		w.chat(t, 60)
		seen := w.s.watch(job.ID, 3*time.Minute)
		return seen[len(seen)-1]
	})
	if last.State != jobs.Done {
		t.Fatalf("the update ended %s: %q\n%+v", last.State, last.Error, last.Steps)
	}
	if pl, _ := last.Step(jobs.StepPlan); !strings.Contains(pl.Detail, "so it is served in place of chatty's replica") {
		t.Errorf("the plan step: %q", pl.Detail)
	}
	if c, _ := last.Step(jobs.StepCanary); c.State != jobs.Done {
		t.Errorf("the canary step: %+v; want the version judged on its share", c)
	}
	w.runsCommit(t, "after its update", w.moved)
	var m catalog.Model
	if w.s.do("GET", "/api/v1/catalog/chatty", nil, &m); m.Scaling.Min != 2 {
		t.Errorf("chatty keeps %d replicas after its update, want 2 again", m.Scaling.Min)
	}
	testkit.WaitFor(t, time.Minute, "chatty back to two replicas", func() (bool, string) {
		return w.s.settled("chatty", 2), "chatty's replicas"
	})
}

// TestACancelledInPlaceTrialPutsTheModelBack: an operator cancels chatty's
// update while its suite runs on the new version in place; the job's end
// brings chatty back to the version it served, rolls the update back and
// leaves nothing of the trial, and clients' requests never fail.
func TestACancelledInPlaceTrialPutsTheModelBack(t *testing.T) {
	w := newRoomForOne(t)
	before := w.answer(t)
	// A suite long enough to cancel the trial while it runs.
	var cases []map[string]any
	for i := range 40 {
		cases = append(cases, map[string]any{"name": "case " + strconv.Itoa(i), "prompt": "Count to " + strconv.Itoa(i), "max_tokens": 64,
			"expect": map[string]any{"regex": "(?s).*"}})
	}
	if code := w.s.do("PUT", "/api/v1/catalog/chatty/evals", map[string]any{"cases": cases}, nil); code != http.StatusOK {
		t.Fatalf("PUT the suite: %d", code)
	}
	mustRun(t, "a long enough password\n", "user", "add", "--data", w.cfg.Data, "alice")
	console := newConsole(t, w.s.base, nil)
	console.signIn("alice", "a long enough password")
	last := w.inPlace(t, "while chatty's update in place was cancelled", func() jobs.Job {
		var job jobs.Job
		if code := w.s.do("POST", "/api/v1/catalog/chatty/update", nil, &job); code != http.StatusAccepted {
			t.Fatalf("update: %d %+v", code, job)
		}
		testkit.WaitFor(t, 2*time.Minute, "the suite running on the new version in place", func() (bool, string) {
			w.s.do("GET", "/api/v1/jobs/"+job.ID, nil, &job)
			e, _ := job.Step(jobs.StepEval)
			return strings.Contains(e.Detail, "now serving in place") || job.Ended(), jobSaw(job)
		})
		if job.Ended() {
			t.Fatalf("the update ended before it could be cancelled: %s %q\n%+v", job.State, job.Error, job.Steps)
		}
		// The update's page says where it is on trial.
		_, page := console.page("/updates/" + strconv.FormatInt(w.update.ID, 10))
		if got := page.Find(`[data-testid="trial"] p`).First().Text(); !strings.Contains(got, "is on trial in place of chatty's replica") {
			t.Errorf("the update page during its trial in place says %q", got)
		}
		if code := w.s.do("POST", "/api/v1/jobs/"+job.ID+"/cancel", nil, nil); code != http.StatusOK {
			t.Fatalf("cancel: %d", code)
		}
		seen := w.s.watch(job.ID, time.Minute)
		return seen[len(seen)-1]
	})
	if last.State != jobs.Cancelled {
		t.Fatalf("the update ended %s: %q\n%+v", last.State, last.Error, last.Steps)
	}
	w.runsCommit(t, "after its trial in place was cancelled", w.served)
	testkit.WaitFor(t, time.Minute, "chatty's replica on its old version", func() (bool, string) {
		return w.s.settled("chatty", 1), "chatty's replicas"
	})
	if now := w.answer(t); now != before {
		t.Errorf("chatty answers %q after the cancelled trial, want its old version's %q", now, before)
	}
	w.canaryGone(t, "the update's job was cancelled")
}

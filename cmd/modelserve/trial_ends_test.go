package main

import (
	"math"
	"net/http"
	"os"
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

// canaryGone checks, as a user would, that the trial of w's update ended
// rolled back with nothing of its canary left: no entry, no replica, its
// version rolled_back with a reason saying why, the update rolled_back,
// and chatty still serving its old commit.
func (w *updateWorld) canaryGone(t *testing.T, why string) { w.trialEnded(t, why, true) }

// trialEnded is canaryGone for a trial that ran (tried: the new version is
// listed rolled back, saying why) or was refused before its canary was
// added (only the current version is listed).
func (w *updateWorld) trialEnded(t *testing.T, why string, tried bool) {
	t.Helper()
	name := catalog.CanaryName("chatty", w.moved)
	if code := w.s.do("GET", "/api/v1/catalog/"+name, nil, nil); code != http.StatusNotFound {
		t.Errorf("the canary's entry after its trial ended: %d, want gone", code)
	}
	testkit.WaitFor(t, time.Minute, "the canary's replica gone", func() (bool, string) {
		var reps struct {
			Replicas []struct{ Model, State string }
		}
		w.s.do("GET", "/api/v1/replicas", nil, &reps)
		for _, r := range reps.Replicas {
			if r.Model == name {
				return false, "a replica of " + name + " " + r.State
			}
		}
		return true, ""
	})
	vs, canaryName, _ := w.versions(t)
	switch {
	case !tried:
		if canaryName != "" || len(vs) != 1 || vs[0].State != catalog.VersionCurrent {
			t.Errorf("versions after the update was refused: canary %q, %+v; want only the current one", canaryName, vs)
		}
	case canaryName != "" || len(vs) != 2 || vs[0].Commit != w.moved || vs[0].State != catalog.VersionRolledBack ||
		!strings.Contains(vs[0].Reason, why) || vs[1].State != catalog.VersionCurrent:
		t.Errorf("versions after the trial ended: canary %q, %+v; want the new one rolled_back saying %q", canaryName, vs, why)
	}
	var up updates.Update
	if w.s.do("GET", "/api/v1/updates/"+strconv.FormatInt(w.update.ID, 10), nil, &up); up.State != updates.StateRolledBack {
		t.Errorf("the update is %s, want rolled_back", up.State)
	}
	var m catalog.Model
	if w.s.do("GET", "/api/v1/catalog/chatty", nil, &m); m.Origin == nil || m.Origin.Revision != w.served {
		t.Errorf("chatty after the trial ended runs %+v, want %s", m.Origin, w.served)
	}
	w.chat(t, 3)
}

// TestAPoisonedTrialIsRolledBack: modelserve dies twice in the middle of a
// trial; the next start fails the job by the poison-job guard, and the
// trial ends rolled back with its canary gone, rather than stranded with
// an entry, a replica and an update running that nothing would end. A
// retry of the job then tries the update again.
func TestAPoisonedTrialIsRolledBack(t *testing.T) {
	w := newUpdateWorld(t, testPolicy(200))
	job := w.startUpdate(t)
	if job.Ended() {
		t.Fatalf("the update ended before its trial: %s %s", job.State, job.Error)
	}
	// Two processes that died running the job leave what a clean stop
	// then two deaths would: the job running, counted twice unclean.
	w.s.stop()
	db := testkit.OpenDBFile(t, filepath.Join(w.cfg.Data, "modelserve.db"))
	if _, err := db.Exec(`UPDATE jobs SET unclean_starts = 2 WHERE id = ?`, job.ID); err != nil {
		t.Fatal(err)
	}
	db.Close()
	w.s = startAPI(t, w.cfg)

	w.s.do("GET", "/api/v1/jobs/"+job.ID, nil, &job)
	const why = "modelserve stopped twice while this job was in its canary step"
	if job.State != jobs.Failed || !strings.HasPrefix(job.Error, why) {
		t.Fatalf("after two deaths the update is %s: %q; want failed by the poison guard", job.State, job.Error)
	}
	w.canaryGone(t, why)

	var again jobs.Job
	if code := w.s.do("POST", "/api/v1/jobs/"+job.ID+"/retry", nil, &again); code != http.StatusAccepted {
		t.Fatalf("retrying the poisoned update: %d", code)
	}
	testkit.WaitFor(t, 2*time.Minute, "the retried canary on trial", func() (bool, string) {
		w.s.do("GET", "/api/v1/jobs/"+again.ID, nil, &again)
		st, _ := again.Step(jobs.StepCanary)
		return st.State != "" || again.Ended(), jobSaw(again)
	})
	if again.Ended() {
		t.Fatalf("the retry ended %s before its trial: %q\n%+v", again.State, again.Error, again.Steps)
	}
	if code := w.s.do("POST", "/api/v1/catalog/chatty/rollback", nil, &again); code != http.StatusOK || again.State != jobs.Failed {
		t.Fatalf("rolling the retry back by hand: %d, %s %q", code, again.State, again.Error)
	}
	w.canaryGone(t, "rolled back by")
}

// TestACanaryWithNoRoomBesideItsModelIsRefused: chatty reserves most of
// this machine's memory, so its canary cannot run beside it, and its
// update settings say it may not be replaced in place; the update fails
// its plan saying so, and its trial is rolled back with the canary gone,
// rather than ending done with no trial and the update running for ever.
func TestACanaryWithNoRoomBesideItsModelIsRefused(t *testing.T) {
	total, avail := machineMemory(t)
	// More than half the memory, so two cannot fit; less than what is
	// free now, so one does.
	gb := int(math.Ceil(float64(total) * 0.55 / (1 << 30)))
	if int64(gb+1)<<30 > avail {
		t.Skipf("this machine has %d GiB free: not enough for one replica of %d GiB", avail>>30, gb)
	}
	w := newUpdateWorldServing(t, testPolicy(20), ggufgen.Spec{ContextLength: 8192}, updates.PolicyManual, map[string]any{"memory_gb": gb})
	if code := w.s.do("PUT", "/api/v1/catalog/chatty/updates", map[string]any{"in_place": false}, nil); code != http.StatusOK {
		t.Fatalf("turning in place off: %d", code)
	}
	var job jobs.Job
	if code := w.s.do("POST", "/api/v1/catalog/chatty/update", nil, &job); code != http.StatusAccepted {
		t.Fatalf("update: %d", code)
	}
	seen := w.s.watch(job.ID, 3*time.Minute)
	last := seen[len(seen)-1]
	const why = "there is no room beside chatty for its canary"
	if last.State != jobs.Failed || !strings.HasPrefix(last.Error, why) {
		t.Fatalf("the update ended %s: %q\n%+v", last.State, last.Error, last.Steps)
	}
	// Refused at once, at the plan step, before a byte of the new
	// weights is fetched.
	if st, _ := last.Step(jobs.StepPlan); st.State != jobs.Failed {
		t.Errorf("the plan step: %+v, want it failed", st)
	}
	if st, _ := last.Step(jobs.StepMirror); st.State == jobs.Done || st.BytesDone > 0 {
		t.Errorf("the mirror step: %+v, want nothing fetched", st)
	}
	t.Logf("refused: %s", last.Error)
	w.trialEnded(t, why, false)
}

// TestAPromotionThatCannotRestartGoesBack: chatty's canary passes its
// trial, but the new weights on the mirror were replaced behind
// modelserve's back by a damaged copy, as a restore or a sync that writes
// a file beside the old and renames it over does. The canary's engine
// keeps the file it opened and serves on; every engine started after it
// fails to load the new one. The promotion's restart of chatty therefore
// fails until the fleet parks it: the trial ends at once, rolled back,
// saying why, with chatty's entry on its old commit and its replica
// ready, rather than waiting out the placement's half hour and then
// recording a promotion that never served.
func TestAPromotionThatCannotRestartGoesBack(t *testing.T) {
	w := newUpdateWorld(t, testPolicy(20))
	job := w.startUpdate(t)
	if job.Ended() {
		t.Fatalf("the update ended before its trial: %s %s\n%+v", job.State, job.Error, job.Steps)
	}
	damage(t, filepath.Join(w.cfg.Data, "mirror", "chatty", hf.Short(w.moved), updFile))

	w.chat(t, 200)
	seen := w.s.watch(job.ID, 3*time.Minute)
	last := seen[len(seen)-1]
	const why = "the promoted version's replicas could not start"
	if last.State != jobs.Failed || !strings.Contains(last.Error, why) || !strings.Contains(last.Error, "parked") {
		t.Fatalf("the update ended %s: %q\n%+v", last.State, last.Error, last.Steps)
	}
	t.Logf("rolled back: %s", last.Error)
	judged, _ := last.Step(jobs.StepCanary)
	verdict, _ := last.Step(jobs.StepVerdict)
	if judged.State != jobs.Done || verdict.State != jobs.Failed || !strings.Contains(verdict.Detail, why) {
		t.Errorf("the canary step %+v and the verdict %+v; want it judged, then the verdict failed saying why", judged, verdict)
	}
	// From the canary's verdict to chatty serving its old commit again:
	// three failed starts and their backoff, then one that loads.
	took := last.Finished.Sub(judged.At)
	t.Logf("from the verdict to the end of the roll-back: %s", took.Round(time.Millisecond))
	if took > 2*time.Minute {
		t.Errorf("the roll-back took %s after the verdict, where the placement's own timeout is 30 minutes", took)
	}

	// Its replica is ready on the old commit when the job ends, not
	// starting, and the park of the version that failed is gone with it.
	var fleet struct {
		Replicas []struct {
			Model, State string
			Started      time.Time
		}
		Models []struct {
			Model  string
			Parked bool
			Ready  int
		}
	}
	w.s.do("GET", "/api/v1/replicas", nil, &fleet)
	ready := 0
	for _, r := range fleet.Replicas {
		if r.Model == "chatty" && r.State == "ready" && r.Started.After(judged.At) {
			ready++
		}
	}
	if ready != 1 {
		t.Errorf("chatty's replicas when the roll-back ended: %+v; want one ready, started after the verdict", fleet.Replicas)
	}
	for _, h := range fleet.Models {
		if h.Model == "chatty" && h.Parked {
			t.Errorf("chatty is still parked after the roll-back: %+v", h)
		}
	}
	w.canaryGone(t, why)
}

// damage replaces file by a copy of its first half, written beside it
// and renamed over it: an engine that has the file open keeps the whole
// one, and one that opens it now finds its tensors cut short.
func damage(t *testing.T, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	tmp := file + ".restored"
	if err := os.WriteFile(tmp, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
}

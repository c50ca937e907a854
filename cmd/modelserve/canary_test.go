package main

import (
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/canary"
	"modelserve/internal/evals"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/llamatest"
	"modelserve/internal/testkit"
	"modelserve/internal/updates"
	"modelserve/jobs"
)

// updateWorld is a model served from a branch, by the real binary with the
// real engine, whose branch then moves to new weights that were noticed.
type updateWorld struct {
	s             *apiServer
	cfg           config
	hub           *hubtest.Server
	served, moved string
	update        updates.Update
}

const updRepo, updFile = "acme/Chatty-GGUF", "Chatty-Q4_K_M.gguf"

// testPolicy judges a canary on n requests within two minutes. Two copies
// of a tiny model differ in speed by whatever else the machine runs (the
// test packages run side by side on two cores), so the latency and speed
// margins are opened wide here: these tests are of the trial, and the
// judge's margins are internal/canary's tests.
func testPolicy(n int) canary.Policy {
	p := canary.DefaultPolicy
	p.MinRequests, p.Window = n, 2*time.Minute
	p.LatencyMargin, p.LatencySlack, p.SpeedMargin = 100, time.Second, 0.01
	return p
}

func newUpdateWorld(t *testing.T, policy canary.Policy) *updateWorld {
	return newUpdateWorldTo(t, policy, ggufgen.Spec{ContextLength: 8192}, updates.PolicyManual)
}

// newUpdateWorldTo is newUpdateWorld with the branch moved to weights made
// from next, chatty's update policy being updatePolicy.
func newUpdateWorldTo(t *testing.T, policy canary.Policy, next ggufgen.Spec, updatePolicy string) *updateWorld {
	t.Helper()
	return newUpdateWorldServing(t, policy, next, updatePolicy, nil)
}

// newUpdateWorldServing is newUpdateWorldTo with chatty served with the
// request's fields in also (memory_gb, ...); tune, when given, sets more
// of modelserve's config (--local-memory).
func newUpdateWorldServing(t testing.TB, policy canary.Policy, next ggufgen.Spec, updatePolicy string, also map[string]any, tune ...func(*config)) *updateWorld {
	t.Helper()
	engine := llamatest.Path(t)
	w := &updateWorld{hub: hubtest.New(t)}
	w.hub.AddRepo(updRepo, hubtest.RepoOptions{})
	w.served = w.hub.AddFile(updRepo, updFile, ggufgen.Bytes(ggufgen.Spec{}))
	w.cfg = config{Addr: "127.0.0.1:0", Data: t.TempDir(), HFEndpoint: w.hub.URL(), LlamaServer: engine,
		UpdateInterval: 6 * time.Hour, CanaryShare: 0.1, CanaryPolicy: policy}
	for _, f := range tune {
		f(&w.cfg)
	}
	w.s = startAPI(t, w.cfg)

	var job jobs.Job
	req := map[string]any{"repo": updRepo, "replicas": 1, "context_length": 1024, "ctx_pool": 2048}
	for k, v := range also {
		req[k] = v
	}
	if code := w.s.do("POST", "/api/v1/serve", req, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d", code)
	}
	if seen := w.s.watch(job.ID, 3*time.Minute); seen[len(seen)-1].State != jobs.Done {
		t.Fatalf("serving chatty ended %s: %s", seen[len(seen)-1].State, seen[len(seen)-1].Error)
	}
	if code := w.s.do("PUT", "/api/v1/catalog/chatty/updates", map[string]any{"policy": updatePolicy}, nil); code != http.StatusOK {
		t.Fatalf("setting chatty's update policy: %d", code)
	}
	w.moved = w.hub.AddFile(updRepo, updFile, ggufgen.Bytes(next))
	var res updates.Result
	if code := w.s.do("POST", "/api/v1/catalog/chatty/check", nil, &res); code != http.StatusOK || res.Update == nil {
		t.Fatalf("check: %d %+v", code, res)
	}
	w.update = *res.Update
	return w
}

// startUpdate asks for chatty's update and waits for its canary to be on
// its share of the traffic.
func (w *updateWorld) startUpdate(t *testing.T) jobs.Job {
	t.Helper()
	var job jobs.Job
	if code := w.s.do("POST", "/api/v1/catalog/chatty/update", nil, &job); code != http.StatusAccepted || job.Kind != jobs.KindUpdate {
		t.Fatalf("update: %d %+v", code, job)
	}
	testkit.WaitFor(t, 2*time.Minute, "the canary on trial", func() (bool, string) {
		w.s.do("GET", "/api/v1/jobs/"+job.ID, nil, &job)
		st, _ := job.Step(jobs.StepCanary)
		return st.State != "" || job.Ended(), jobSaw(job)
	})
	return job
}

// versions are chatty's versions as the API says them.
func (w *updateWorld) versions(t testing.TB) (vs []catalog.Version, canaryName string, share float64) {
	t.Helper()
	var out struct {
		Versions []catalog.Version
		Canary   *struct {
			Name  string
			Share float64
		}
	}
	if code := w.s.do("GET", "/api/v1/catalog/chatty/versions", nil, &out); code != http.StatusOK {
		t.Fatalf("versions: %d", code)
	}
	if out.Canary != nil {
		canaryName, share = out.Canary.Name, out.Canary.Share
	}
	return out.Versions, canaryName, share
}

// chat sends n requests for chatty through the gateway, as clients do,
// each of which must be answered.
func (w *updateWorld) chat(t *testing.T, n int) {
	t.Helper()
	if failed := w.ask(t, n); failed > 0 {
		t.Fatalf("%d of %d requests for chatty failed", failed, n)
	}
}

// ask sends n requests for chatty and says how many were not answered.
func (w *updateWorld) ask(t *testing.T, n int) (failed int) {
	t.Helper()
	for i := range n {
		var out struct {
			Model   string
			Choices []struct{ Message struct{ Content string } }
		}
		body := map[string]any{"model": "chatty", "max_tokens": 4,
			"messages": []map[string]string{{"role": "user", "content": "hello " + strconv.Itoa(i)}}}
		if code := w.s.do("POST", "/v1/chat/completions", body, &out); code != http.StatusOK || len(out.Choices) != 1 {
			failed++
		}
	}
	return failed
}

// TestUpdateTriedAsACanaryThenPromoted: an update of a served model is
// served beside it as a canary, takes its share of chatty's requests, is
// judged no worse and promoted: chatty then runs the new commit, its old
// version is retired, and the canary is gone.
func TestUpdateTriedAsACanaryThenPromoted(t *testing.T) {
	policy := testPolicy(20)
	w := newUpdateWorld(t, policy)
	// A suite any answer passes: the trial runs it before the canary's
	// share and after.
	suite := map[string]any{"cases": []map[string]any{{"name": "any", "prompt": "Say hello.", "max_tokens": 4, "expect": map[string]any{"regex": "(?s).*"}}}}
	if code := w.s.do("PUT", "/api/v1/catalog/chatty/evals", suite, nil); code != http.StatusOK {
		t.Fatalf("PUT the suite: %d", code)
	}
	job := w.startUpdate(t)
	if job.Ended() {
		t.Fatalf("the update ended before its trial: %s %s\n%+v", job.State, job.Error, job.Steps)
	}
	vs, name, share := w.versions(t)
	if name != catalog.CanaryName("chatty", w.moved) || share != 0.1 || len(vs) != 2 || vs[0].State != catalog.VersionCanary || vs[1].State != catalog.VersionCurrent {
		t.Errorf("while on trial: canary %q at %v, versions %+v", name, share, vs)
	}

	w.chat(t, 200)
	seen := w.s.watch(job.ID, 3*time.Minute)
	last := seen[len(seen)-1]
	if last.State != jobs.Done {
		t.Fatalf("the update ended %s: %s\n%+v", last.State, last.Error, last.Steps)
	}
	if v, _ := last.Step(jobs.StepVerdict); !strings.Contains(v.Detail, "promoted: chatty now serves "+w.moved[:7]) ||
		!strings.Contains(v.Detail, "after serving its share") {
		t.Errorf("verdict: %+v; want the promotion and the eval after the share", v)
	}
	// The steps ran one after another, each ending no sooner than the one
	// before: the job page's step times are each step's own (the eval's
	// second run, after the canary's share, is the verdict's).
	for i := 1; i < len(last.Steps); i++ {
		if a, b := last.Steps[i-1], last.Steps[i]; b.At.Before(a.At) {
			t.Errorf("step %s ended at %s, before %s before it (%s)", b.Name, b.At.Format(time.StampMilli), a.Name, a.At.Format(time.StampMilli))
		}
	}
	if e, _ := last.Step(jobs.StepEval); e.State != jobs.Done || !strings.Contains(e.Detail, "before it takes any request") {
		t.Errorf("the eval step: %+v", e)
	}
	// 10% of 200 requests, exactly: the gateway splits by count.
	if c, _ := last.Step(jobs.StepCanary); !strings.Contains(c.Detail, "no worse than the current version over 20 requests") {
		t.Errorf("the canary step: %+v", c)
	}
	var m catalog.Model
	if w.s.do("GET", "/api/v1/catalog/chatty", nil, &m); m.Origin == nil || m.Origin.Revision != w.moved || m.Origin.Ref != "main" || m.Canary != nil {
		t.Errorf("chatty after the promotion: %+v", m.Origin)
	}
	vs, name, _ = w.versions(t)
	if name != "" || len(vs) != 2 || vs[0].Commit != w.moved || vs[0].State != catalog.VersionCurrent ||
		vs[1].Commit != w.served || vs[1].State != catalog.VersionRetired {
		t.Errorf("after the promotion: canary %q, versions %+v", name, vs)
	}
	var reps struct {
		Replicas []struct{ ID, Model, State string }
	}
	w.s.do("GET", "/api/v1/replicas", nil, &reps)
	for _, r := range reps.Replicas {
		if r.Model != "chatty" && r.State != "stopped" && r.State != "stopping" {
			t.Errorf("replica %+v is still there after the promotion", r)
		}
	}
	var up updates.Update
	if w.s.do("GET", "/api/v1/updates/"+strconv.FormatInt(w.update.ID, 10), nil, &up); up.State != updates.StatePromoted {
		t.Errorf("the update is %s, want promoted", up.State)
	}
	w.chat(t, 3)
}

// TestAFailingCanaryIsRolledBack: the canary's engine dies whenever it
// starts, the requests it was sent fail (and are answered by the current
// version for the client), and the trial rolls it back by itself with the
// reason; chatty never stops serving its old commit, and the mirror keeps
// both.
func TestAFailingCanaryIsRolledBack(t *testing.T) {
	policy := testPolicy(200)
	w := newUpdateWorld(t, policy)
	job := w.startUpdate(t)
	name := catalog.CanaryName("chatty", w.moved)

	// An engine fault: the canary's engine is killed each time it runs,
	// until the job ends; clients keep asking chatty meanwhile.
	ended := make(chan jobs.Job, 1)
	go func() { seen := w.s.watch(job.ID, 3*time.Minute); ended <- seen[len(seen)-1] }()
	var last jobs.Job
	deadline := time.After(2 * time.Minute)
	for last.ID == "" {
		select {
		case last = <-ended:
			continue
		case <-deadline:
			t.Fatal("the failing canary was not rolled back within 2 minutes")
		default:
		}
		var reps struct {
			Replicas []struct {
				Model string
				PID   int `json:"pid"`
			}
		}
		w.s.do("GET", "/api/v1/replicas", nil, &reps)
		for _, r := range reps.Replicas {
			if r.Model == name && r.PID > 0 {
				_ = syscall.Kill(r.PID, syscall.SIGKILL)
			}
		}
		// A request the canary was answering when its engine was killed
		// may fail; the others go to chatty.
		w.ask(t, 5)
	}
	if last.State != jobs.Failed || !strings.Contains(last.Error, name+" rolled back, chatty still serving "+w.served[:7]) {
		t.Fatalf("the update ended %s: %q\n%+v", last.State, last.Error, last.Steps)
	}
	t.Logf("rolled back: %s", last.Error)
	var m catalog.Model
	if w.s.do("GET", "/api/v1/catalog/chatty", nil, &m); m.Origin == nil || m.Origin.Revision != w.served {
		t.Errorf("chatty after the roll-back runs %+v, want %s", m.Origin, w.served)
	}
	if code := w.s.do("GET", "/api/v1/catalog/"+name, nil, nil); code != http.StatusNotFound {
		t.Errorf("the canary's entry after the roll-back: %d, want gone", code)
	}
	vs, canaryName, _ := w.versions(t)
	if canaryName != "" || len(vs) != 2 || vs[0].State != catalog.VersionRolledBack || vs[0].Reason == "" || vs[1].State != catalog.VersionCurrent {
		t.Errorf("versions after the roll-back: %+v", vs)
	}
	var up updates.Update
	if w.s.do("GET", "/api/v1/updates/"+strconv.FormatInt(w.update.ID, 10), nil, &up); up.State != updates.StateRolledBack {
		t.Errorf("the update is %s, want rolled_back", up.State)
	}
	var mirror struct {
		Files []struct{ Model, Revision, Path string }
	}
	w.s.do("GET", "/api/v1/mirror", nil, &mirror)
	revs := map[string]bool{}
	for _, f := range mirror.Files {
		revs[f.Revision] = true
	}
	if !revs[w.served[:7]] || !revs[w.moved[:7]] {
		t.Errorf("the mirror holds %v, want both versions kept", revs)
	}
	w.chat(t, 3)
}

// TestACanaryCarriesOnAfterARestart: modelserve stopped in the middle of a
// trial carries it on at its next start: the same job, the canary with its
// entry and share, then its verdict.
func TestACanaryCarriesOnAfterARestart(t *testing.T) {
	policy := testPolicy(20)
	w := newUpdateWorld(t, policy)
	job := w.startUpdate(t)
	name := catalog.CanaryName("chatty", w.moved)
	w.chat(t, 50) // 5 for the canary: fewer than it is judged on

	w.s.stop()
	restarted := time.Now()
	w.s = startAPI(t, w.cfg)
	testkit.WaitFor(t, 2*time.Minute, "the resumed trial on traffic again", func() (bool, string) {
		w.s.do("GET", "/api/v1/jobs/"+job.ID, nil, &job)
		st, _ := job.Step(jobs.StepCanary)
		return st.State == jobs.Running && st.At.After(restarted) || job.Ended(), jobSaw(job)
	})
	if _, canaryName, share := w.versions(t); job.Ended() || canaryName != name || share != 0.1 {
		t.Fatalf("after the restart: job %s (%s), canary %q at %v", job.State, job.Error, canaryName, share)
	}
	w.chat(t, 200)
	seen := w.s.watch(job.ID, 3*time.Minute)
	last := seen[len(seen)-1]
	if last.State != jobs.Done {
		t.Fatalf("the resumed update ended %s: %s\n%+v", last.State, last.Error, last.Steps)
	}
	if c, _ := last.Step(jobs.StepCanary); !strings.Contains(c.Detail, "over 20 requests") {
		t.Errorf("the resumed canary was judged on %q, want the 20 requests after the restart", c.Detail)
	}
	var m catalog.Model
	if w.s.do("GET", "/api/v1/catalog/chatty", nil, &m); m.Origin == nil || m.Origin.Revision != w.moved {
		t.Errorf("chatty after the resumed promotion: %+v", m.Origin)
	}
}

// evalRun runs chatty's suite against chatty now and returns the run.
func (w *updateWorld) evalRun(t *testing.T) evals.Run {
	t.Helper()
	var run evals.Run
	if code := w.s.do("POST", "/api/v1/catalog/chatty/evals/run", nil, &run); code != http.StatusAccepted {
		t.Fatalf("running chatty's suite: %d", code)
	}
	testkit.WaitFor(t, time.Minute, "the eval run ended", func() (bool, string) {
		w.s.do("GET", "/api/v1/evals/runs/"+strconv.FormatInt(run.ID, 10), nil, &run)
		return run.State != evals.StateRunning, "the run " + string(run.State)
	})
	return run
}

// TestAnEvalTheUpdateFailsBlocksIt: chatty's suite holds a case its
// current version passes (its own answer, asked the same way); the update
// (new vocabulary, so other words) fails it, and is rolled back before any
// client's request reaches it.
func TestAnEvalTheUpdateFailsBlocksIt(t *testing.T) {
	policy := testPolicy(20)
	w := newUpdateWorldTo(t, policy, ggufgen.Spec{Vocab: []string{"zebra", "quartz", "nimbus", "fjord", "glyph", "oxbow"}}, updates.PolicyManual)
	suite := func(answer string) map[string]any {
		return map[string]any{"cases": []map[string]any{{"name": "as it answers", "prompt": "Say hello.", "max_tokens": 8,
			"expect": map[string]any{"exact": answer}}}}
	}
	if code := w.s.do("PUT", "/api/v1/catalog/chatty/evals", suite("nothing it says"), nil); code != http.StatusOK {
		t.Fatalf("PUT the suite: %d", code)
	}
	first := w.evalRun(t)
	if first.State != evals.StateDone || len(first.Results) != 1 || first.Results[0].Answer == "" {
		t.Fatalf("the first run: %+v", first)
	}
	w.s.do("PUT", "/api/v1/catalog/chatty/evals", suite(first.Results[0].Answer), nil)
	if run := w.evalRun(t); run.Passed != 1 {
		t.Fatalf("chatty fails a case holding its own answer %q: %+v", first.Results[0].Answer, run.Results)
	}

	var job jobs.Job
	if code := w.s.do("POST", "/api/v1/catalog/chatty/update", nil, &job); code != http.StatusAccepted {
		t.Fatalf("update: %d", code)
	}
	seen := w.s.watch(job.ID, 3*time.Minute)
	last := seen[len(seen)-1]
	if last.State != jobs.Failed || !strings.Contains(last.Error, "its eval passed 0 of 1 cases against 1 of 1 for the current version") {
		t.Fatalf("the update ended %s: %q\n%+v", last.State, last.Error, last.Steps)
	}
	if st, ok := last.Step(jobs.StepCanary); ok {
		t.Errorf("the canary took traffic after failing its eval: %+v", st)
	}
	// Rolled back by its eval, and said so: not a failure with a retry
	// that would be judged the same.
	decided, ok := last.RolledBack()
	if !ok || decided.Name != jobs.StepEval || decided.State != jobs.RolledBack || last.EndStep() != jobs.StepEval {
		t.Errorf("the update ended at %q, decided by %+v (%v); want rolled back by its eval", last.EndStep(), decided, ok)
	}
	if code := w.s.do("POST", "/api/v1/jobs/"+job.ID+"/retry", nil, nil); code != http.StatusConflict {
		t.Errorf("retrying a trial its eval rolled back: %d, want 409", code)
	}
	rolledBackInTheConsole(t, w, job.ID, "its eval passed 0 of 1 cases")
	var m catalog.Model
	if w.s.do("GET", "/api/v1/catalog/chatty", nil, &m); m.Origin == nil || m.Origin.Revision != w.served {
		t.Errorf("chatty after the failed eval runs %+v, want %s", m.Origin, w.served)
	}
	var runs struct{ Runs []evals.Run }
	w.s.do("GET", "/api/v1/catalog/chatty/evals", nil, &runs)
	targets := map[string]int{}
	for _, r := range runs.Runs {
		targets[r.Target]++
	}
	if targets[catalog.CanaryName("chatty", w.moved)] != 1 {
		t.Errorf("the runs kept %v, want the canary's run beside chatty's", targets)
	}
}

// TestAnAutoUpdateNeedsNoHand: chatty's policy is auto, so the check that
// notices its update starts the trial by itself, and the trial promotes
// it by itself.
func TestAnAutoUpdateNeedsNoHand(t *testing.T) {
	policy := testPolicy(20)
	w := newUpdateWorldTo(t, policy, ggufgen.Spec{ContextLength: 8192}, updates.PolicyAuto)
	var list struct{ Jobs []jobs.Job }
	w.s.do("GET", "/api/v1/jobs", nil, &list)
	if len(list.Jobs) != 2 || list.Jobs[0].Kind != jobs.KindUpdate || list.Jobs[0].Request.UpdateID != w.update.ID {
		t.Fatalf("jobs after the check: %+v, want the update's trial started by itself", list.Jobs)
	}
	job := list.Jobs[0]
	testkit.WaitFor(t, 2*time.Minute, "the canary on trial", func() (bool, string) {
		w.s.do("GET", "/api/v1/jobs/"+job.ID, nil, &job)
		st, _ := job.Step(jobs.StepCanary)
		return st.State != "" || job.Ended(), jobSaw(job)
	})
	w.chat(t, 200)
	seen := w.s.watch(job.ID, 3*time.Minute)
	if last := seen[len(seen)-1]; last.State != jobs.Done {
		t.Fatalf("the auto update ended %s: %s", last.State, last.Error)
	}
	var m catalog.Model
	if w.s.do("GET", "/api/v1/catalog/chatty", nil, &m); m.Origin == nil || m.Origin.Revision != w.moved {
		t.Errorf("chatty after the auto update runs %+v, want %s", m.Origin, w.moved)
	}
}

// rolledBackInTheConsole checks, as an operator reading the console would,
// that job reads "rolled back" on the jobs list and on its page, both
// naming its eval step, the page saying why (decided) and offering no
// Retry.
func rolledBackInTheConsole(t *testing.T, w *updateWorld, job, decided string) {
	t.Helper()
	mustRun(t, "a long enough password\n", "user", "add", "--data", w.cfg.Data, "alice")
	c := newConsole(t, w.s.base, nil)
	c.signIn("alice", "a long enough password")
	_, list := c.page("/jobs")
	row := list.Find(`[data-testid="job-row"][data-job="` + job + `"]`)
	if state, step := strings.Join(strings.Fields(row.Find(`[data-testid="job-outcome"]`).Text()), " "), row.Find(`[data-testid="job-step"]`).Text(); state != "↺ rolled back" || step != jobs.StepEval {
		t.Errorf("the jobs list says the update is %q at %q; want rolled back at %s", state, step, jobs.StepEval)
	}
	_, page := c.page("/jobs/" + job)
	out := page.Find(`[data-testid="outcome"]`)
	if got := strings.Join(strings.Fields(out.Find(`[data-testid="rolled-back"]`).Text()), " "); got != "↺ Rolled back by the eval step:" {
		t.Errorf("the job page's outcome says %q", got)
	}
	if got := out.Find(`[data-testid="decided-by"]`).Text(); !strings.Contains(got, decided) {
		t.Errorf("the job page says it was decided by %q; want %q in it", got, decided)
	}
	if page.Find(`[data-testid="retry"]`).Length() != 0 || strings.Contains(page.Text(), "✗ failed") {
		t.Errorf("the job page of a trial rolled back offers a retry or says failed: %s", strings.Join(strings.Fields(page.Find("main").Text()), " "))
	}
}

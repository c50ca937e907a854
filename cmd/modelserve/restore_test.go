package main

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"modelserve/catalog"
	"modelserve/internal/engine"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
	"modelserve/internal/updates"
	"modelserve/jobs"
)

// promoted is w with its update tried and promoted: chatty runs w.moved,
// and w.served is its retired version.
func (w *updateWorld) promoted(t *testing.T) {
	t.Helper()
	job := w.startUpdate(t)
	if job.Ended() {
		t.Fatalf("the update ended before its trial: %s %s\n%+v", job.State, job.Error, job.Steps)
	}
	w.chat(t, 200)
	seen := w.s.watch(job.ID, 3*time.Minute)
	if last := seen[len(seen)-1]; last.State != jobs.Done {
		t.Fatalf("the update ended %s: %s\n%+v", last.State, last.Error, last.Steps)
	}
}

// version is chatty's version at commit, as the API lists it.
func (w *updateWorld) version(t testing.TB, commit string) catalog.Version {
	t.Helper()
	vs, _, _ := w.versions(t)
	for _, v := range vs {
		if v.Commit == commit {
			return v
		}
	}
	t.Fatalf("chatty has no version at %s: %+v", hf.Short(commit), vs)
	return catalog.Version{}
}

// restore asks for chatty's version id to be served again and waits for
// its job to end.
func (w *updateWorld) restore(t testing.TB, id int64) jobs.Job {
	t.Helper()
	var job jobs.Job
	if code := w.s.do("POST", "/api/v1/catalog/chatty/versions/"+strconv.FormatInt(id, 10)+"/restore", nil, &job); code != http.StatusAccepted || job.Kind != jobs.KindRestore {
		t.Fatalf("restore: %d %+v", code, job)
	}
	seen := w.s.watch(job.ID, 4*time.Minute)
	return seen[len(seen)-1]
}

// TestARestoreServesTheVersionBeforeAgain: after chatty's update was
// promoted, the mirror still holds its old version's files. A restore of
// the old version whose engine cannot start (its file on the mirror was
// damaged) ends with the sentence of why, and chatty serves on at the
// new version. Once the file is whole again, a restore serves the old
// version again while clients stream throughout: not one of their
// requests fails, chatty runs its old commit, and the new one is retired,
// to be restored the same way.
func TestARestoreServesTheVersionBeforeAgain(t *testing.T) {
	w := newUpdateWorld(t, testPolicy(20))
	w.promoted(t)
	was := w.version(t, w.served)
	if was.State != catalog.VersionRetired {
		t.Fatalf("the version before the promotion is %s, want retired", was.State)
	}
	var mirror struct {
		Files []struct{ Model, Revision, Path, State string }
	}
	w.s.do("GET", "/api/v1/mirror", nil, &mirror)
	revs := map[string]bool{}
	for _, f := range mirror.Files {
		revs[f.Revision] = f.Model == "chatty" && f.State == "present"
	}
	if !revs[hf.Short(w.served)] || !revs[hf.Short(w.moved)] {
		t.Fatalf("the mirror after the promotion holds %+v; want both versions' files kept", mirror.Files)
	}
	// The mirror page says which version of chatty each file is.
	mustRun(t, "a long enough password\n", "user", "add", "--data", w.cfg.Data, "alice")
	c := newConsole(t, w.s.base, nil)
	c.signIn("alice", "a long enough password")
	_, page := c.page("/mirror")
	held := map[string]string{}
	page.Find(`[data-testid="file-row"]`).Each(func(_ int, row *goquery.Selection) {
		held[row.Find("code").First().Text()] = row.Find(`[data-testid="file-version"]`).Text()
	})
	if held[hf.Short(w.served)] != fmt.Sprintf("retired version %d", was.ID) || !strings.HasPrefix(held[hf.Short(w.moved)], "current version ") {
		t.Errorf("the mirror page says the files are of %v; want the retired and the current version", held)
	}

	// The old version's engine cannot start: its tokenizer is one
	// llama.cpp does not know, the file's size unchanged.
	file := filepath.Join(w.cfg.Data, "mirror", "chatty", hf.Short(w.served), updFile)
	whole := unknownTokenizer(t, file)
	failed := w.restore(t, was.ID)
	if failed.State != jobs.Failed || !strings.HasPrefix(failed.Error, "chatty at "+hf.Short(w.served)+" was not served again: ") ||
		!strings.Contains(failed.Error, "parked") || !strings.HasSuffix(failed.Error, "chatty serves on as it did") {
		t.Fatalf("the restore of a version that cannot start ended %s: %q\n%+v", failed.State, failed.Error, failed.Steps)
	}
	t.Logf("not served again: %s", failed.Error)
	var m catalog.Model
	if w.s.do("GET", "/api/v1/catalog/chatty", nil, &m); m.Origin == nil || m.Origin.Revision != w.moved {
		t.Errorf("chatty after the failed restore runs %+v, want %s", m.Origin, hf.Short(w.moved))
	}
	if code := w.s.do("GET", "/api/v1/catalog/"+catalog.CanaryName("chatty", w.served), nil, nil); code != http.StatusNotFound {
		t.Errorf("the failed restore's entry: %d, want gone", code)
	}
	if v := w.version(t, w.served); v.State != catalog.VersionRetired || !strings.Contains(v.Reason, failed.ID) {
		t.Errorf("the version that did not start again: %+v; want retired, naming the job that tried", v)
	}
	w.chat(t, 3)

	replace(t, file, whole)
	ld := startLoad(w.s.base, w.s.token, "chatty", 4)
	done := w.restore(t, was.ID)
	time.Sleep(time.Second) // requests after the restore, on the version restored
	sent, lost := ld.end()
	if done.State != jobs.Done {
		t.Fatalf("the restore ended %s: %q\n%+v", done.State, done.Error, done.Steps)
	}
	if st, _ := done.Step(jobs.StepRestore); st.State != jobs.Done || !strings.Contains(st.Detail, "chatty serves "+hf.Short(w.served)+" again") {
		t.Errorf("the restore step: %+v", st)
	}
	t.Logf("%d requests while the old version was served again, %d failed", sent, len(lost))
	if sent == 0 || len(lost) > 0 {
		t.Errorf("%d of %d requests failed while the old version was served again: %v", len(lost), sent, lost)
	}
	if w.s.do("GET", "/api/v1/catalog/chatty", nil, &m); m.Origin == nil || m.Origin.Revision != w.served || m.Origin.Ref != "main" || m.Canary != nil {
		t.Errorf("chatty after the restore: %+v, want %s on main", m.Origin, hf.Short(w.served))
	}
	if v := w.version(t, w.served); v.State != catalog.VersionCurrent {
		t.Errorf("the version restored: %+v, want current", v)
	}
	if v := w.version(t, w.moved); v.State != catalog.VersionRetired || !strings.Contains(v.Reason, "replaced by "+hf.Short(w.served)) {
		t.Errorf("the version it replaced: %+v, want retired", v)
	}
	for _, r := range w.s.replicas(catalog.CanaryName("chatty", w.served)) {
		if r.State != "stopped" {
			t.Errorf("replica %+v is still there after the restore", r)
		}
	}
	// The version it runs is not served again, and one it never had is
	// not found; each said in a sentence.
	var refusal struct{ Error string }
	if code := w.s.do("POST", "/api/v1/catalog/chatty/versions/"+strconv.FormatInt(was.ID, 10)+"/restore", nil, &refusal); code != http.StatusConflict ||
		!strings.Contains(refusal.Error, "chatty runs version "+strconv.FormatInt(was.ID, 10)+" ("+hf.Short(w.served)+") already") {
		t.Errorf("restoring the version chatty runs: %d %q", code, refusal.Error)
	}
	if code := w.s.do("POST", "/api/v1/catalog/chatty/versions/99/restore", nil, &refusal); code != http.StatusNotFound ||
		!strings.Contains(refusal.Error, "GET /api/v1/catalog/chatty/versions lists them") {
		t.Errorf("restoring a version chatty never had: %d %q", code, refusal.Error)
	}
	// Each version's history holds what its own smoke test measured.
	var history struct {
		Versions []struct {
			Commit          string
			TokensPerSecond float64 `json:"tokens_per_second"`
			MeasuredBy      string  `json:"measured_by"`
		}
	}
	w.s.do("GET", "/api/v1/catalog/chatty/versions", nil, &history)
	for _, v := range history.Versions {
		if v.TokensPerSecond <= 0 || (v.Commit == w.served && v.MeasuredBy != done.ID) {
			t.Errorf("the history of %s: %+v; want its speed, measured by its newest job", hf.Short(v.Commit), v)
		}
	}
	w.chat(t, 3)
}

// unknownTokenizer rewrites the GGUF file's tokenizer model ("llama") as
// one llama.cpp does not know, in place and the size unchanged, so the
// mirror still takes it as whole; it returns the file as it was.
func unknownTokenizer(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("tokenizer.ggml.model")
	i := bytes.Index(b, key)
	if i < 0 {
		t.Fatalf("%s has no tokenizer model", file)
	}
	at := i + len(key) + 4 + 8 // the value's type, then its length
	if string(b[at:at+5]) != "llama" {
		t.Fatalf("%s's tokenizer model is %q", file, b[at:at+5])
	}
	bad := bytes.Clone(b)
	copy(bad[at:], "xxxxx")
	replace(t, file, bad)
	return b
}

// replace writes b beside file and renames it over it, as damage does.
func replace(t *testing.T, file string, b []byte) {
	t.Helper()
	tmp := file + ".restored"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
}

// TestACriticalCanaryTakesAnOpportunisticReplicasRoom: chatty is critical
// and reserves a third of this machine's memory; filler, opportunistic,
// another third. Its canary does not fit beside both, and takes filler's
// room by the classes' rule, as a serve of a critical model would, rather
// than the update being refused for want of room beside chatty.
func TestACriticalCanaryTakesAnOpportunisticReplicasRoom(t *testing.T) {
	total, avail := machineMemory(t)
	// Two fit, three do not.
	gb := int(math.Ceil(float64(total) * 0.34 / (1 << 30)))
	if int64(2*gb+1)<<30 > avail {
		t.Skipf("this machine has %d GiB free: not enough for two replicas of %d GiB", avail>>30, gb)
	}
	w := newUpdateWorldServing(t, testPolicy(20), ggufgen.Spec{ContextLength: 8192}, updates.PolicyManual,
		map[string]any{"memory_gb": gb, "class": catalog.ClassCritical})
	w.hub.AddRepo("acme/Filler-GGUF", hubtest.RepoOptions{})
	w.hub.AddFile("acme/Filler-GGUF", "Filler-Q4_K_M.gguf", ggufgen.Bytes(ggufgen.Spec{}))
	var job jobs.Job
	serve := map[string]any{"repo": "acme/Filler-GGUF", "name": "filler", "replicas": 1, "context_length": 1024, "ctx_pool": 2048,
		"memory_gb": gb, "class": catalog.ClassOpportunistic}
	if code := w.s.do("POST", "/api/v1/serve", serve, &job); code != http.StatusAccepted {
		t.Fatalf("serving filler: %d", code)
	}
	if seen := w.s.watch(job.ID, 3*time.Minute); seen[len(seen)-1].State != jobs.Done {
		t.Fatalf("serving filler ended %s: %s", seen[len(seen)-1].State, seen[len(seen)-1].Error)
	}

	up := w.startUpdate(t)
	if up.Ended() {
		t.Fatalf("the critical model's update ended %s before its trial: %q\n%+v", up.State, up.Error, up.Steps)
	}
	name := catalog.CanaryName("chatty", w.moved)
	if !w.s.settled(name, 1) {
		t.Errorf("the canary's replicas: %+v, want one ready", w.s.replicas(name))
	}
	for _, r := range w.s.replicas("filler") {
		if r.State == "ready" {
			t.Errorf("filler's replica %s is still ready beside the canary: %+v", r.ID, r)
		}
	}
	w.chat(t, 3)
	if code := w.s.do("POST", "/api/v1/catalog/chatty/rollback", nil, &up); code != http.StatusOK {
		t.Fatalf("rolling the trial back by hand: %d", code)
	}
}

// machineMemory is this machine's memory and what of it is free now, for
// a test that sizes models by it; skipped where /proc/meminfo is not.
func machineMemory(t *testing.T) (total, avail int64) {
	t.Helper()
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Skip("no /proc/meminfo to size the models by")
	}
	defer f.Close()
	total, avail, err = engine.ParseMeminfo(f)
	if err != nil {
		t.Fatal(err)
	}
	return total, avail
}

package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/updates"
	"modelserve/jobs"
)

// TestNewWeightsNoticedThroughTheAPI is the updates slice as a script sees
// it: serve a model from a branch, see the branch move to a re-uploaded
// GGUF, ask for a check, and find the update listed and counted; a model
// served at a tag is refused a check.
func TestNewWeightsNoticedThroughTheAPI(t *testing.T) {
	hub := hubtest.New(t)
	const id, file = "acme/Tiny-GGUF", "Tiny-Q4_K_M.gguf"
	old := ggufgen.Bytes(ggufgen.Spec{})
	hub.AddRepo(id, hubtest.RepoOptions{})
	served := hub.AddFile(id, file, old)
	hub.SetRef(id, "v1", served)
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: t.TempDir(), HFEndpoint: hub.URL(), UpdateInterval: 6 * time.Hour})

	for _, req := range []map[string]any{
		{"repo": id, "replicas": 0},
		{"repo": id, "revision": "v1", "name": "tiny-v1", "replicas": 0},
	} {
		var job jobs.Job
		if code := s.do("POST", "/api/v1/serve", req, &job); code != http.StatusAccepted {
			t.Fatalf("serve %v: %d", req, code)
		}
		if seen := s.watch(job.ID, 2*time.Minute); seen[len(seen)-1].State != jobs.Done {
			t.Fatalf("job %s ended %s: %s", job.ID, seen[len(seen)-1].State, seen[len(seen)-1].Error)
		}
	}
	var m catalog.Model
	if s.do("GET", "/api/v1/catalog/tiny", nil, &m); m.Origin == nil || m.Origin.Ref != "main" || m.Origin.RefKind != "branch" {
		t.Fatalf("tiny's origin %+v, want the branch main", m.Origin)
	}

	fresh := ggufgen.Bytes(ggufgen.Spec{ContextLength: 8192})
	moved := hub.AddFile(id, file, fresh)
	var res updates.Result
	if code := s.do("POST", "/api/v1/catalog/tiny/check", nil, &res); code != 200 || res.Result != updates.ResultUpdateAvailable ||
		res.Commit != moved || res.Update == nil || len(res.Update.Files) != 1 {
		t.Fatalf("check: %d %+v", code, res)
	}
	if f := res.Update.Files[0]; f.Path != file || f.OldBytes != int64(len(old)) || f.NewBytes != int64(len(fresh)) || f.OldSHA256 == f.NewSHA256 {
		t.Errorf("the changed file %+v, want %s from %d to %d bytes", f, file, len(old), len(fresh))
	}

	var list struct{ Updates []updates.Update }
	if s.do("GET", "/api/v1/updates", nil, &list); len(list.Updates) != 1 || list.Updates[0].Model != "tiny" ||
		list.Updates[0].OldCommit != served || list.Updates[0].NewCommit != moved {
		t.Errorf("updates: %+v", list.Updates)
	}
	var st updates.Status
	if s.do("GET", "/api/v1/catalog/tiny/updates", nil, &st); st.Available == nil || st.Interval != "6h0m0s" || st.LastCheck == nil {
		t.Errorf("tiny's status: %+v", st)
	}

	hub.ResetCounters()
	var e struct{ Error string }
	if code := s.do("POST", "/api/v1/catalog/tiny-v1/check", nil, &e); code != http.StatusConflict || !strings.Contains(e.Error, "pinned to the tag v1") {
		t.Errorf("checking the model served at a tag: %d %q", code, e.Error)
	}
	if n := len(hub.Log()); n != 0 {
		t.Errorf("the registry was asked %d times about a model pinned to a tag", n)
	}

	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"modelserve_updates_noticed_total 1", `modelserve_update_checks_total{result="update_available"} 1`} {
		if !strings.Contains(string(text), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

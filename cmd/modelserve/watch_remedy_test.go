package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/updates"
	"modelserve/jobs"
)

// TestTheRemedyForAModelNotWatchedWorks: a model served at a tag is not
// watched, and says what to do; each way it names, followed as written
// through the API, gives a model that is watched.
func TestTheRemedyForAModelNotWatchedWorks(t *testing.T) {
	hub := hubtest.New(t)
	const id, file = "acme/Tiny-GGUF", "Tiny-Q4_K_M.gguf"
	hub.AddRepo(id, hubtest.RepoOptions{})
	hub.SetRef(id, "v1", hub.AddFile(id, file, ggufgen.Bytes(ggufgen.Spec{})))
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: t.TempDir(), HFEndpoint: hub.URL(), UpdateInterval: 6 * time.Hour})
	serve := func(req map[string]any) {
		t.Helper()
		var job jobs.Job
		if code := s.do("POST", "/api/v1/serve", req, &job); code != http.StatusAccepted {
			t.Fatalf("serve %v: %d", req, code)
		}
		if seen := s.watch(job.ID, 2*time.Minute); seen[len(seen)-1].State != jobs.Done {
			t.Fatalf("serve %v ended %s: %s", req, seen[len(seen)-1].State, seen[len(seen)-1].Error)
		}
	}
	status := func(name string) updates.Status {
		t.Helper()
		var st updates.Status
		if code := s.do("GET", "/api/v1/catalog/"+name+"/updates", nil, &st); code != http.StatusOK {
			t.Fatalf("%s's status: %d", name, code)
		}
		return st
	}

	serve(map[string]any{"repo": id, "revision": "v1", "name": "tiny", "replicas": 0})
	st := status("tiny")
	want := "tiny is pinned to the tag v1 and is never updated: to have it watched for new weights, serve " + id +
		" from a branch (revision main) under another name, or remove tiny from the catalog and serve it from one as tiny again"
	if st.Watched || st.NotWatched != want {
		t.Fatalf("tiny's status says %q; want %q", st.NotWatched, want)
	}

	// Under another name.
	serve(map[string]any{"repo": id, "revision": "main", "name": "tiny-main", "replicas": 0})
	if st := status("tiny-main"); !st.Watched {
		t.Errorf("served from main under another name, it is not watched: %s", st.NotWatched)
	}
	// Or removed and served again under its own.
	if code := s.do("DELETE", "/api/v1/catalog/tiny", nil, nil); code != http.StatusOK && code != http.StatusNoContent {
		t.Fatalf("removing tiny: %d", code)
	}
	serve(map[string]any{"repo": id, "revision": "main", "name": "tiny", "replicas": 0})
	if st := status("tiny"); !st.Watched || !strings.Contains(st.Ref, "main") {
		t.Errorf("removed and served from main as tiny again, it is not watched: %+v", st)
	}
}

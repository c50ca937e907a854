package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/llamatest"
	"modelserve/internal/testkit"
	"modelserve/jobs"
)

// TestADataFolderOfTheLastReleaseServesAsBefore: a catalog entry written
// the way the release before profiles had fields of their own wrote it
// (llama-server's arguments and one memory figure) is upgraded as
// modelserve starts, and its replica starts with the same file, pool and
// slots as before.
func TestADataFolderOfTheLastReleaseServesAsBefore(t *testing.T) {
	engine := llamatest.Path(t)
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Chatty-GGUF", "Chatty-Q4_K_M.gguf", ggufgen.Spec{})
	data := t.TempDir()
	cfg := config{Addr: "127.0.0.1:0", Data: data, HFEndpoint: hub.URL(), LlamaServer: engine}
	s := startAPI(t, cfg)
	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Chatty-GGUF", "replicas": 1, "context_length": 1024, "ctx_pool": 2048}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d", code)
	}
	if last := s.watch(job.ID, 3*time.Minute); last[len(last)-1].State != jobs.Done {
		t.Fatalf("job ended %s: %s", last[len(last)-1].State, last[len(last)-1].Error)
	}
	var before catalog.Model
	s.do("GET", "/api/v1/catalog/chatty", nil, &before)
	s.stop()

	// The entry as the last release stored it.
	db := testkit.OpenDBFile(t, filepath.Join(data, "modelserve.db"))
	if _, err := db.Exec(`UPDATE models SET spec = json_set(json_remove(spec, '$.profiles[0].pool', '$.profiles[0].slots', '$.profiles[0].ram_bytes', '$.weights'),
		'$.profiles[0].args', json('["--ctx-size","2048","--parallel","2"]'), '$.profiles[0].min_memory_bytes', ?) WHERE name = 'chatty'`,
		before.Profiles[0].RAMBytes); err != nil {
		t.Fatal(err)
	}
	var old string
	db.QueryRow(`SELECT spec FROM models WHERE name = 'chatty'`).Scan(&old)
	db.Close()
	if !strings.Contains(old, `"args":["--ctx-size","2048","--parallel","2"]`) || strings.Contains(old, `"pool"`) || strings.Contains(old, `"weights"`) {
		t.Fatalf("the entry was not written as the last release wrote it: %s", old)
	}

	s = startAPI(t, cfg)
	var pid int
	testkit.WaitFor(t, 2*time.Minute, "chatty's replica started again", func() (bool, string) {
		pid = enginePIDIfReady(s)
		return pid != 0, "no replica of chatty ready"
	})
	args, _ := processOf(t, pid)
	if !strings.Contains(args, "--ctx-size 2048 --parallel 2 ") || !strings.Contains(args, "chatty/"+before.Source[len("chatty/"):]) {
		t.Errorf("the engine started as %q, want the same file in a 2048 pool of 2 slots", args)
	}
	var after catalog.Model
	s.do("GET", "/api/v1/catalog/chatty", nil, &after)
	if p := after.Profiles[0]; p.Pool != 2048 || p.Slots != 2 || p.RAMBytes != before.Profiles[0].RAMBytes || after.Source != before.Source {
		t.Errorf("after the upgrade chatty is %+v from %s, want %+v from %s", p, after.Source, before.Profiles[0], before.Source)
	}
}

package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modelserve/internal/hubtest"
	"modelserve/internal/llamatest"
)

// TestCardsTheEngineCannotUseAreShown: on a machine with two L4s whose
// llama-server is the CPU-only build (the installed one, asked for real),
// the pool the planner and the serve form read has no card, and both
// /api/v1/nodes and the fleet page say what was seen and what to do.
func TestCardsTheEngineCannotUseAreShown(t *testing.T) {
	bin := t.TempDir()
	smi := "#!/bin/sh\nprintf 'NVIDIA L4, 23034, 0\\nNVIDIA L4, 23034, 0\\n'\n"
	if err := os.WriteFile(filepath.Join(bin, "nvidia-smi"), []byte(smi), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	data := t.TempDir()
	mustMakeData(t, data)
	mustRun(t, "a long enough password\n", "user", "add", "--data", data, "alice")
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: data, HFEndpoint: hubtest.New(t).URL(), LlamaServer: llamatest.Path(t)})

	const want = "2×L4 seen; the engine build has no GPU backend: install one or set --llama-server"
	var nodes struct {
		Nodes []struct {
			GPUs []any  `json:"gpus"`
			Note string `json:"note"`
		} `json:"nodes"`
		Fleet []struct {
			GPUs []any  `json:"gpus"`
			Note string `json:"note"`
		} `json:"fleet"`
	}
	if code := s.do("GET", "/api/v1/nodes", nil, &nodes); code != http.StatusOK || len(nodes.Nodes) != 1 || len(nodes.Fleet) != 1 {
		t.Fatalf("the nodes: %d %+v", code, nodes)
	}
	if n := nodes.Nodes[0]; len(n.GPUs) != 0 || n.Note != want {
		t.Errorf("the pool's node has cards %v and note %q; want none and %q", n.GPUs, n.Note, want)
	}
	if n := nodes.Fleet[0]; len(n.GPUs) != 0 || n.Note != want {
		t.Errorf("the fleet's node has cards %v and note %q; want none and %q", n.GPUs, n.Note, want)
	}

	c := newConsole(t, s.base, nil)
	c.signIn("alice", "a long enough password")
	if _, doc := c.page("/fleet"); !strings.Contains(doc.Text(), want) {
		t.Errorf("the fleet page does not say %q", want)
	}
}

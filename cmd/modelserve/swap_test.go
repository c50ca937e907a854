package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/llamatest"
	"modelserve/jobs"
)

// TestLocalMemoryIsTheNodesMemory: with --local-memory the local node has
// that much memory in the pool, and a serve with the defaults is sized to
// it: the check step cuts the default pool to fit, and the replica starts
// and answers.
func TestLocalMemoryIsTheNodesMemory(t *testing.T) {
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Tiny-Llama-GGUF", "Tiny-Llama-Q4_K_M.gguf", ggufgen.Spec{ContextLength: 32768})
	const budget = 180 << 20 // the tiny model needs about 200 MB with the default 16384-token pool
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: t.TempDir(), HFEndpoint: hub.URL(), LlamaServer: llamatest.Path(t),
		LocalMemory: budget})
	var nodes struct {
		Nodes []struct {
			RAMBytes int64 `json:"ram_bytes"`
		} `json:"nodes"`
	}
	if code := s.do("GET", "/api/v1/nodes", nil, &nodes); code != http.StatusOK || len(nodes.Nodes) != 1 || nodes.Nodes[0].RAMBytes != budget {
		t.Fatalf("the nodes: %d %+v; want one with %d bytes", code, nodes, budget)
	}
	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Tiny-Llama-GGUF", "replicas": 1}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d %+v", code, job)
	}
	seen := s.watch(job.ID, 2*time.Minute)
	last := seen[len(seen)-1]
	if last.State != jobs.Done || last.Reply == "" {
		t.Fatalf("serving ended %s: %s; steps %+v", last.State, last.Error, last.Steps)
	}
	if check, _ := last.Step(jobs.StepCheck); !strings.Contains(check.Detail, "cut to fit") {
		t.Errorf("the check step says %q; want the default pool cut to fit the budget", check.Detail)
	}
}

// TestLocalMemoryTooSmallIsASentence: a --local-memory no model can run in
// stops the start with a sentence naming the figures, not a crash or a
// fleet that never places anything.
func TestLocalMemoryTooSmallIsASentence(t *testing.T) {
	cfg, err := parseServe([]string{"--local-memory", "100MB", "--data", t.TempDir(), "--addr", "127.0.0.1:0"},
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	err = serve(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(string) {})
	if err == nil || !strings.Contains(err.Error(), "cannot hold any model: llama-server alone takes") {
		t.Errorf("serve with 100MB: %v; want a sentence that it cannot hold any model", err)
	}
	for _, bad := range []string{"lots", "-1GB", "NaN", "5PB", "12XB"} {
		if _, err := parseServe([]string{"--local-memory", bad}, func(string) string { return "" }, io.Discard); err == nil ||
			!strings.Contains(err.Error(), "--local-memory is the memory") {
			t.Errorf("--local-memory %q: %v; want it refused in a sentence", bad, err)
		}
	}
	cfg, err = parseServe(nil, func(k string) string {
		if k == "MODELSERVE_LOCAL_MEMORY" {
			return "12GiB"
		}
		return ""
	}, io.Discard)
	if err != nil || cfg.LocalMemory != 12<<30 {
		t.Errorf("MODELSERVE_LOCAL_MEMORY=12GiB reads as %d, %v", cfg.LocalMemory, err)
	}
}

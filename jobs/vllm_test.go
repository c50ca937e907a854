package jobs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modelserve/internal/hubtest"
	"modelserve/internal/plan"
)

// TestOriginalWeightsKeepTheirEngineSettings: a request for original
// weights with engine settings gets them on the vLLM profile it is served
// with, as a GGUF file's profile does; before, the vLLM profile was made
// without them and vLLM started with none.
func TestOriginalWeightsKeepTheirEngineSettings(t *testing.T) {
	nodes := []plan.Node{{Name: "gpu-1", CPUCores: 16, RAMGB: 64, FreeRAMGB: 60, CPUBandwidthGBs: 20,
		GPUs: []plan.GPU{{Class: "L4", Count: 1, MemoryGB: 22.5, BandwidthGBs: 300, FreeGB: []float64{22.5}}}}}
	pool := func() []plan.Node { return nodes }
	e := newEnv(t, func(e *testEnv) {
		e.deps.Pool, e.deps.VLLM = pool, "vllm/vllm-openai:v0.11.0"
		pl, err := plan.New(plan.Config{Pool: pool, Headers: plan.ReadHeaders(e.client), Configs: plan.ReadConfigs(e.client),
			DownloadURL: e.client.DownloadURL})
		if err != nil {
			t.Fatal(err)
		}
		e.deps.Planner = pl
	})
	const repo = "meta-llama/Llama-3.1-8B-Instruct"
	cfg, err := os.ReadFile(filepath.Join("..", "internal", "plan", "testdata", "configs", "llama-3.1-8b-instruct.json"))
	if err != nil {
		t.Fatal(err)
	}
	e.hub.AddRepo(repo, hubtest.RepoOptions{})
	e.hub.AddFile(repo, "config.json", cfg)
	e.hub.AddFile(repo, "tokenizer.json", []byte(`{"version": "1.0"}`))
	e.hub.AddFile(repo, "model.safetensors", []byte(strings.Repeat("w", 4096)))

	settings := map[string]string{"NCCL_P2P_DISABLE": "1", "CUDA_MODULE_LOADING": "LAZY"}
	j := MustEnd(t, e.srv, MustStart(t, e.srv, Request{Repo: repo, Format: FormatSafetensors, GPUClass: "L4", Name: "llama",
		Replicas: 0, ContextLength: 4096, CtxPool: 16384, Env: settings}).ID)
	if j.State != Done {
		t.Fatalf("job ended %s: %s", j.State, j.Error)
	}
	m, err := e.catalog.Get(context.Background(), "llama")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Profiles) != 1 || m.Profiles[0].Engine != plan.EngineVLLM {
		t.Fatalf("profiles %+v, want one on vLLM", m.Profiles)
	}
	if got := m.Profiles[0].Env; len(got) != len(settings) || got["NCCL_P2P_DISABLE"] != "1" || got["CUDA_MODULE_LOADING"] != "LAZY" {
		t.Errorf("the vLLM profile's settings are %v, want %v", got, settings)
	}
}

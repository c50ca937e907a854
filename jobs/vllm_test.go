package jobs

import (
	"context"
	"modelserve/catalog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modelserve/internal/hubtest"
	"modelserve/internal/plan"
)

// TestOriginalWeightsKeepTheirEngineSettings: a request for original
// weights with engine settings and fallbacks gets, from the plan, a vLLM
// profile for its layout and one for each fallback the plan offers, each
// with the settings and the size asked, as a GGUF file's profiles do;
// before, the job made the one vLLM profile itself and dropped the
// fallbacks.
func TestOriginalWeightsKeepTheirEngineSettings(t *testing.T) {
	nodes := []plan.Node{{Name: "gpu-1", CPUCores: 16, RAMBytes: plan.Bytes(64), FreeRAMBytes: plan.Bytes(60), CPUBandwidthGBs: 20,
		GPUs: []plan.GPU{{Class: "L4", Count: 1, MemoryBytes: plan.Bytes(22.5), BandwidthGBs: 300, FreeBytes: []int64{plan.Bytes(22.5)}}}},
		{Name: "gpu-2", CPUCores: 16, RAMBytes: plan.Bytes(64), FreeRAMBytes: plan.Bytes(60), CPUBandwidthGBs: 20,
			GPUs: []plan.GPU{{Class: "A100-80GB", Count: 2, MemoryBytes: plan.Bytes(80), BandwidthGBs: 2000, FreeBytes: []int64{plan.Bytes(80), plan.Bytes(80)}}}}}
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
		Replicas: 0, ContextLength: 4096, CtxPool: 16384, Env: settings, Fallbacks: true}).ID)
	if j.State != Done {
		t.Fatalf("job ended %s: %s", j.State, j.Error)
	}
	m, err := e.catalog.Get(context.Background(), "llama")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Profiles) < 2 || m.Profiles[0].Name != "gpu-1xl4" {
		t.Fatalf("profiles %+v, want the L4 first and the plan's fallbacks after it", m.Profiles)
	}
	for i, p := range m.Profiles {
		if p.Engine != plan.EngineVLLM || p.GPUClass == "" || p.CardBytes <= 0 {
			t.Errorf("profile %s is %+v, want vLLM on cards, sized", p.Name, p)
		}
		if p.Size != (catalog.Size{Pool: 16384, Slots: 4}) {
			t.Errorf("profile %s holds %s, want the 16384 tokens in 4 slots of 4096 asked", p.Name, p.Size.Words())
		}
		if i > 0 && p.Priority >= m.Profiles[i-1].Priority {
			t.Errorf("fallback %s has priority %d, not below %s's %d", p.Name, p.Priority, m.Profiles[i-1].Name, m.Profiles[i-1].Priority)
		}
		if got := p.Env; len(got) != len(settings) || got["NCCL_P2P_DISABLE"] != "1" || got["CUDA_MODULE_LOADING"] != "LAZY" {
			t.Errorf("the vLLM profile %s's settings are %v, want %v", p.Name, got, settings)
		}
	}
}

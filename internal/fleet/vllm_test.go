package fleet

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/testkit"
	"modelserve/internal/vllmtest"
)

// specNode is a node that keeps the spec of every engine it started.
type specNode struct {
	Node
	mu    sync.Mutex
	specs []Spec
}

func (n *specNode) Start(ctx context.Context, spec Spec) (Process, error) {
	n.mu.Lock()
	n.specs = append(n.specs, spec)
	n.mu.Unlock()
	return n.Node.Start(ctx, spec)
}

// vllmEntry is a catalog entry of original weights in a folder of the
// mirror (a public config.json, sparse shards), on one L4 by vLLM.
func vllmEntry(t *testing.T, name string) catalog.Model {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join("..", "plan", "testdata", "configs", "llama-3.1-8b-instruct.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
	shards := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
	for _, s := range shards {
		if err := os.Truncate(filepath.Join(dir, s), 0); err != nil {
			f, _ := os.Create(filepath.Join(dir, s))
			f.Close()
		}
		os.Truncate(filepath.Join(dir, s), 15<<30/2)
	}
	return catalog.Model{Name: name, Source: dir, Weights: append(shards, "config.json"), ContextLength: 4096,
		Profiles: []catalog.Profile{{Name: "gpu-1xl4", Engine: EngineVLLM, GPUClass: "L4", GPUsPerNode: 1, CardBytes: 20 << 30,
			Size: catalog.Size{Pool: 16384, Slots: 4}, Priority: 100, Weight: 1}},
		Scaling: catalog.Scaling{Min: 1, Max: 1}}
}

// TestTheLocalFleetRunsVLLM: a model of original weights is started as
// `vllm serve` on its folder (the double playing vLLM), on the card it was
// placed on, with its key in VLLM_API_KEY; it answers at its endpoint, and
// its load is read from vLLM's /metrics, its prefix cache's hits with it.
func TestTheLocalFleetRunsVLLM(t *testing.T) {
	vllm := vllmtest.Entrypoint(t, vllmtest.Hardware{Cards: 1, CardBytes: 23034 << 20})
	cat := MustCatalog(t)
	MustAdd(t, cat, vllmEntry(t, "llama"))
	node := &specNode{Node: MustLocalNode(t, LocalConfig{Name: "gpu", CPUCores: 4, RAMBytes: 16 << 30,
		GPUs: []Card{{Index: 0, Class: "L4", MemoryBytes: 24 << 30}, {Index: 1, Class: "L4", MemoryBytes: 24 << 30}}})}
	tf := MustRun(t, cat, Options{VLLM: vllm, Nodes: []Node{node}, LoadEvery: 50 * time.Millisecond})
	tf.Poke()
	r := tf.waitReady(t, "llama", time.Minute)

	node.mu.Lock()
	spec := node.specs[0]
	node.mu.Unlock()
	m, _ := cat.Get(context.Background(), "llama")
	want := append([]string{"serve"}, VLLMArgs(m, m.Profiles[0], m.Source)...)
	if spec.Engine != vllm || !slices.Equal(spec.Args, want) {
		t.Errorf("started %s %q, want %s %q", spec.Engine, spec.Args, vllm, want)
	}
	var key string
	for _, kv := range spec.Env {
		if k, ok := strings.CutPrefix(kv, VLLMKeyEnv+"="); ok {
			key = k
		}
	}
	if key == "" || !slices.Contains(spec.Env, "CUDA_VISIBLE_DEVICES=0") || slices.ContainsFunc(spec.Args, func(a string) bool { return a == key }) {
		t.Errorf("engine environment %q: want VLLM_API_KEY and CUDA_VISIBLE_DEVICES=0, and the key in no argument", spec.Env)
	}

	ask := func(content string) {
		req, _ := http.NewRequest("POST", r.Endpoint+"/v1/chat/completions",
			strings.NewReader(`{"model": "llama", "messages": [{"role": "user", "content": "`+content+`"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), "Hello from vLLM.") {
			t.Errorf("the replica answered %d %s", resp.StatusCode, body)
		}
	}
	// The same prompt twice: the second finds its first two blocks (32 of
	// its 43 tokens) in vLLM's prefix cache.
	long := strings.Repeat("word ", 40)
	ask(long)
	ask(long)
	rep := testkit.WaitForValue(t, 30*time.Second, "the cached tokens in the replica's load", func() (Replica, bool) {
		rep := tf.replicasOf("llama")[0]
		return rep, rep.Load != nil && rep.Load.CachedTokens > 0
	})
	if got := rep.Load; got == nil || got.Size != (catalog.Size{Pool: 16384, Slots: 4}) || got.KVCacheUsage == nil || got.PromptTokens != 54 || got.CachedTokens != 32 {
		t.Errorf("the replica's load %+v, want vLLM's read from /metrics with its 4 sequences of 4096 tokens, 86 prompt tokens of which 32 cached", got)
	}
	if rep.Engine != EngineVLLM {
		t.Errorf("the replica says it runs on %q, want vllm", rep.Engine)
	}
}

// TestWithoutVLLMAModelOnItIsParked: no vllm to start parks the model in a
// sentence that says what to install, and the fleet goes on.
func TestWithoutVLLMAModelOnItIsParked(t *testing.T) {
	cat := MustCatalog(t)
	MustAdd(t, cat, vllmEntry(t, "llama"))
	node := MustLocalNode(t, LocalConfig{Name: "gpu", CPUCores: 4, RAMBytes: 16 << 30,
		GPUs: []Card{{Index: 0, Class: "L4", MemoryBytes: 24 << 30}}})
	tf := MustRun(t, cat, Options{VLLM: filepath.Join(t.TempDir(), "vllm"), Nodes: []Node{node}})
	tf.Poke()
	h := testkit.WaitForValue(t, 30*time.Second, "llama parked", func() (ModelHealth, bool) {
		h, _ := tf.health("llama")
		return h, h.Parked
	})
	if !strings.Contains(h.Reason, "vLLM is not installed on this node") || !strings.Contains(h.Reason, "--vllm") {
		t.Errorf("parked for %q, want a sentence saying to install vLLM or set --vllm", h.Reason)
	}
}

// TestEveryVLLMFlagIsOneTheReleaseKnows holds the command lines both
// fleets start vLLM with to the arguments of the release the double plays,
// read from vLLM's own argument parser (vllmtest's serve-args list): vLLM
// refuses an argument it does not know and exits, so a renamed flag would
// park every model on it.
func TestEveryVLLMFlagIsOneTheReleaseKnows(t *testing.T) {
	m := catalog.Model{Name: "m"}
	for _, p := range []catalog.Profile{
		{Engine: EngineVLLM},
		{Engine: EngineVLLM, GPUsPerNode: 2, Size: catalog.Size{Pool: 32768, Slots: 4}},
		{Engine: EngineVLLM, GPUsPerNode: 8, Size: catalog.Size{Pool: 8192, Slots: 1}},
	} {
		argv := append(VLLMArgs(m, p, "/weights"), "--host", "127.0.0.1", "--port", "8080") // where each fleet has it listen
		a, err := vllmtest.ParseArgs(argv, nil)
		if err != nil {
			t.Errorf("vLLM %s refuses %q: %v", vllmtest.Version, argv, err)
			continue
		}
		if a.Model != "/weights" || a.ServedModelName != "m" || a.TensorParallel != max(p.GPUsPerNode, 1) {
			t.Errorf("vLLM %s reads %q as %+v", vllmtest.Version, argv, a)
		}
		if _, ok := a.Given["--enable-prompt-tokens-details"]; !ok {
			t.Errorf("%q does not ask vLLM to say its prefix cache's hits in each answer's usage", argv)
		}
	}
}

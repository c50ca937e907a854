package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
	"modelserve/internal/operr"
	"modelserve/internal/plan"
)

// TestStartRefuses: each request that cannot be served is refused at once
// with a sentence saying why, and no job is stored.
func TestStartRefuses(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name string
		req  Request
		want string
	}{
		{"no repository", Request{}, `"" is not a repository; it looks like owner/name, or local/<folder>`},
		{"not owner/name", Request{Repo: "just-a-name"}, `"just-a-name" is not a repository`},
		{"climbs out", Request{Repo: "../etc"}, `"../etc" is not a repository`},
		{"negative replicas", Request{Repo: "acme/m", Replicas: -1}, "replicas cannot be negative"},
		{"unknown format", Request{Repo: "acme/m", Format: "onnx"}, `the format is gguf or safetensors, not "onnx"`},
		{"projector with original weights", Request{Repo: "acme/m", Format: "safetensors", Projector: "mmproj.gguf", GPUClass: "L4"},
			"a projector is for a GGUF model; vLLM reads a vision model's own files"},
		{"original weights on the CPU", Request{Repo: "acme/m", Format: "safetensors", CPU: true},
			"original weights run on vLLM, on GPUs; a GGUF file runs on the CPU"},
		{"unknown guard format", Request{Repo: "acme/m", GuardFormat: "yesno", Replicas: 1},
			`the guard format is one of llamaguard3, qwen3guard, shieldgemma, json, not "yesno"`},
		{"unknown class", Request{Repo: "acme/m", Class: "vip"},
			`the class is critical, standard or opportunistic, not "vip"`},
		{"judge on demand", Request{Repo: "acme/m", GuardFormat: "json"},
			"a judge model must always run: give it 1 or more replicas, not 0 (on demand)"},
		{"context longer than the pool", Request{Repo: "acme/m", CtxPool: 4096, ContextLength: 8192},
			"a request of 8192 tokens cannot fit a pool of 4096: give ctx_pool at least context_length"},
		{"replicas past the bound", Request{Repo: "acme/m", Replicas: 100000}, "replicas is at most 64, not 100000"},
		{"a context past the bound", Request{Repo: "acme/m", ContextLength: 1 << 30}, "context_length is at most 16777216, not 1073741824"},
		{"too many slots", Request{Repo: "acme/m", CtxPool: 1 << 20, ContextLength: 16}, "is 65536 slots; an engine serves at most 256 at once"},
		{"cores past the bound", Request{Repo: "acme/m", CPUCores: 1 << 20}, "cpu_cores is at most 4096"},
		{"memory past the bound", Request{Repo: "acme/m", MemoryGB: 1 << 30}, "memory_gb is at most 1048576"},
		{"an unknown GPU class", Request{Repo: "acme/m", GPUClass: "Z9000"}, `the GPU class "Z9000" is not one the planner knows: use one of `},
		{"the longest context and a pool", Request{Repo: "acme/m", Longest: true, CtxPool: 32768},
			"the longest context that fits, or the context given: not both"},
		{"bad catalog name", Request{Repo: "acme/m", Name: "My Model"}, `the model name "My Model" is not allowed`},
		{"environment beyond the engine's settings", Request{Repo: "acme/m", Env: map[string]string{"LD_PRELOAD": "x"}},
			`"LD_PRELOAD" is not an engine setting a request may set`},
		{"a backend library for the engine", Request{Repo: "acme/m", Env: map[string]string{"GGML_BACKEND_PATH": "/srv/x.so"}},
			`"GGML_BACKEND_PATH" is not an engine setting a request may set`},
		{"unknown engine", Request{Repo: "acme/m", Engine: "ollama"}, `the engine is llamacpp or vllm, not "ollama"`},
		{"an idle time that is no duration", Request{Repo: "acme/m", IdleAfter: "a while"},
			`idle_after is a duration from 1s to 168h (a week), such as 30s or 15m, or 0 for the default of 15m, not "a while"`},
		{"an idle time without a unit", Request{Repo: "acme/m", IdleAfter: "30"}, `idle_after is a duration from 1s to 168h`},
		{"an idle time below a second", Request{Repo: "acme/m", IdleAfter: "10ms"}, `not "10ms"`},
		{"an idle time past a week", Request{Repo: "acme/m", IdleAfter: "8760h"}, `not "8760h"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.srv.Start(context.Background(), tc.req)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start refused with %v; want %q", err, tc.want)
			}
			if oe, ok := operr.As(err); !errors.Is(err, ErrInvalid) || !ok || oe.Kind != operr.Invalid {
				t.Errorf("the refusal %v is not an operator's ErrInvalid", err)
			}
			if strings.HasSuffix(err.Error(), ".") {
				t.Errorf("the refusal ends with a period: %q", err)
			}
		})
	}
	_, total, err := e.srv.List(context.Background(), ListOptions{})
	if err != nil || total != 0 {
		t.Errorf("refused requests left %d jobs (%v)", total, err)
	}
}

// TestStepFailures: each way a step fails ends the job failed, with its
// sentence on the step that failed, and nothing in the catalog.
func TestStepFailures(t *testing.T) {
	cases := []struct {
		name  string
		setup func(e *testEnv)
		req   Request
		step  string
		want  string
	}{
		{name: "no such repository", req: Request{Repo: "acme/Nothing-GGUF"}, step: StepRegistry,
			want: "acme/Nothing-GGUF does not exist on"},
		{name: "no such revision", req: Request{Repo: "acme/Tiny-GGUF", Revision: "v9"}, step: StepRegistry,
			setup: func(e *testEnv) {
				e.addModel("acme/Tiny-GGUF", hubtest.RepoOptions{}, map[string]ggufgen.Spec{"tiny-Q4_K_M.gguf": {}})
			},
			want: `acme/Tiny-GGUF has no revision "v9"`},
		{name: "gated without a token", req: Request{Repo: "acme/Gated-GGUF"}, step: StepRegistry,
			setup: func(e *testEnv) {
				e.addModel("acme/Gated-GGUF", hubtest.RepoOptions{Gated: "manual"}, map[string]ggufgen.Spec{"gated-Q4_K_M.gguf": {}})
			},
			want: "acme/Gated-GGUF is gated: set HF_TOKEN"},
		{name: "no file of the quantisation", req: Request{Repo: "acme/Tiny-GGUF", Quant: "Q9_K"}, step: StepPlan,
			setup: func(e *testEnv) {
				e.addModel("acme/Tiny-GGUF", hubtest.RepoOptions{}, map[string]ggufgen.Spec{"tiny-Q4_K_M.gguf": {}, "tiny-Q8_0.gguf": {}})
			},
			want: `acme/Tiny-GGUF has no file matching "Q9_K"; it has: tiny-Q4_K_M, tiny-Q8_0`},
		{name: "no such projector", req: Request{Repo: "acme/Tiny-GGUF", Projector: "mmproj-big.gguf"}, step: StepPlan,
			setup: func(e *testEnv) {
				e.addModel("acme/Tiny-GGUF", hubtest.RepoOptions{}, map[string]ggufgen.Spec{
					"tiny-Q4_K_M.gguf": {}, "mmproj-small.gguf": {Projector: true}})
			},
			want: `acme/Tiny-GGUF has no vision projector "mmproj-big.gguf"; it has: mmproj-small.gguf`},
		{name: "a shard missing", req: Request{Repo: "acme/Split-GGUF"}, step: StepPlan,
			setup: func(e *testEnv) {
				e.hub.AddRepo("acme/Split-GGUF", hubtest.RepoOptions{})
				e.hub.AddFile("acme/Split-GGUF", "split-Q4_K_M-00001-of-00003.gguf", []byte("one"))
				e.hub.AddFile("acme/Split-GGUF", "split-Q4_K_M-00003-of-00003.gguf", []byte("three"))
			},
			want: "split-Q4_K_M is split into 3 shards and acme/Split-GGUF lacks shard 2"},
		{name: "checksum mismatch", req: Request{Repo: "acme/Tiny-GGUF"}, step: StepMirror,
			setup: func(e *testEnv) {
				e.addModel("acme/Tiny-GGUF", hubtest.RepoOptions{}, map[string]ggufgen.Spec{"tiny-Q4_K_M.gguf": {}})
				e.hub.FlipByte("acme/Tiny-GGUF", "tiny-Q4_K_M.gguf", 1000)
			},
			want: "tiny-Q4_K_M.gguf arrived with sha256 "},
		{name: "unsupported architecture", req: Request{Repo: "acme/Foo-GGUF"}, step: StepCheck,
			setup: func(e *testEnv) {
				e.addModel("acme/Foo-GGUF", hubtest.RepoOptions{}, map[string]ggufgen.Spec{"foo-Q4_K_M.gguf": {Architecture: "foo"}})
			},
			want: "llama.cpp b6000 on the nodes cannot run this: its architecture foo is not one it knows"},
		{name: "an architecture of 200,000 characters", req: Request{Repo: "acme/Long-GGUF"}, step: StepCheck,
			setup: func(e *testEnv) {
				e.addModel("acme/Long-GGUF", hubtest.RepoOptions{}, map[string]ggufgen.Spec{"long-Q4_K_M.gguf": {Architecture: strings.Repeat("a", 200_000)}})
			},
			want: "its architecture " + strings.Repeat("a", 200) + "… (199.8 KB cut) is not one it knows"},
		{name: "original weights, which this fleet does not run", req: Request{Repo: "acme/Orig", Format: FormatSafetensors, GPUClass: "L4"},
			step: StepPlan,
			setup: func(e *testEnv) {
				e.hub.AddRepo("acme/Orig", hubtest.RepoOptions{})
				e.hub.AddFile("acme/Orig", "config.json", []byte(`{"architectures": ["LlamaForCausalLM"]}`))
				e.hub.AddFile("acme/Orig", "model.safetensors", []byte("weights"))
			},
			want: "original weights run on vLLM, which this fleet does not start: choose a GGUF file of acme/Orig instead"},
		{name: "not a GGUF file", req: Request{Repo: "acme/Junk-GGUF"}, step: StepCheck,
			setup: func(e *testEnv) {
				e.hub.AddRepo("acme/Junk-GGUF", hubtest.RepoOptions{})
				e.hub.AddFile("acme/Junk-GGUF", "junk-Q4_K_M.gguf", []byte("this is not a model"))
			},
			want: `junk-Q4_K_M.gguf on the mirror cannot be served: it starts with "this", not GGUF: it is not a GGUF model`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if tc.setup != nil {
				tc.setup(e)
			}
			j := MustEnd(t, e.srv, MustStart(t, e.srv, tc.req).ID)
			if j.State != Failed {
				t.Fatalf("job ended %s; want failed on %s", j.State, tc.step)
			}
			st := MustStep(t, j, tc.step)
			if st.State != Failed || !strings.Contains(st.Detail, tc.want) {
				t.Errorf("step %s is %s: %q; want failed saying %q", tc.step, st.State, st.Detail, tc.want)
			}
			if j.Error != st.Detail {
				t.Errorf("the job's error %q is not its step's %q", j.Error, st.Detail)
			}
			// Whatever step it failed at, it says which model it was for.
			if want := hf.ModelName(tc.req.Repo); j.Model != want {
				t.Errorf("the failed job names the model %q, want %q", j.Model, want)
			}
			for _, other := range j.Steps {
				if other.Name != tc.step && other.State != Done {
					t.Errorf("step %s is %s beside the failed %s", other.Name, other.State, tc.step)
				}
			}
			if names := e.catalogNames(); len(names) != 0 {
				t.Errorf("a failed job left %v in the catalog", names)
			}
			// The failure is saved, not only published.
			stored, _, err := load(context.Background(), e.db, j.ID)
			if err != nil || stored.State != Failed || stored.Error != j.Error {
				t.Errorf("stored %+v (%v)", stored, err)
			}
		})
	}
}

// TestGatedWithToken serves a gated repository with a token granted it.
func TestGatedWithToken(t *testing.T) {
	e := newEnv(t, withToken("hf_granted"), withNodeMemory(64<<30))
	e.hub.AddToken("hf_granted", "acme/Gated-GGUF")
	e.addModel("acme/Gated-GGUF", hubtest.RepoOptions{Gated: "manual"}, map[string]ggufgen.Spec{"gated-Q4_K_M.gguf": {}})
	j := MustEnd(t, e.srv, MustStart(t, e.srv, Request{Repo: "acme/Gated-GGUF", Replicas: 1}).ID)
	if j.State != Done {
		t.Fatalf("job ended %s: %s", j.State, j.Error)
	}
	if e.hub.CDNSawAuthorization() {
		t.Error("the token followed the redirect to the CDN")
	}
}

// TestArchitectureNewerThanTheEngine: the check step knows which llama.cpp
// build first runs an architecture, and refuses a model the nodes' build is
// too old for, naming both builds; a build new enough serves it.
func TestArchitectureNewerThanTheEngine(t *testing.T) {
	for _, tc := range []struct {
		build int
		want  string // the check step's failure; "" for a job that is done
	}{
		{4500, "qwen3 needs llama.cpp b5092 or newer; the nodes run b4500"},
		{5092, ""},
		{0, ""}, // a build that could not be read: the list alone decides
	} {
		t.Run(fmt.Sprintf("b%d", tc.build), func(t *testing.T) {
			e := newEnv(t, withEngineBuild(tc.build), withNodeMemory(64<<30))
			e.addModel("acme/Qwen3-GGUF", hubtest.RepoOptions{}, map[string]ggufgen.Spec{"qwen3-Q4_K_M.gguf": {Architecture: "qwen3"}})
			j := MustEnd(t, e.srv, MustStart(t, e.srv, Request{Repo: "acme/Qwen3-GGUF"}).ID)
			if tc.want == "" {
				if j.State != Done {
					t.Fatalf("job ended %s: %s", j.State, j.Error)
				}
				return
			}
			check, _ := j.Step(StepCheck)
			if j.State != Failed || check.State != Failed || !strings.HasPrefix(j.Error, tc.want) {
				t.Fatalf("job ended %s at check %s: %q; want it refused: %q", j.State, check.State, j.Error, tc.want)
			}
			if ms, _ := e.catalog.List(context.Background()); len(ms) != 0 {
				t.Errorf("a refused model is in the catalog: %+v", ms)
			}
		})
	}
}

// TestFitsNowhereIsRefusedBeforeTheDownload: a file no node of the pool
// could ever hold is refused at the plan step, with the sentence the serve
// page shows, and the registry has served its header and nothing more.
func TestFitsNowhereIsRefusedBeforeTheDownload(t *testing.T) {
	tiny := []plan.Node{{Name: "small", CPUCores: 2, RAMBytes: plan.Bytes(0.1), FreeRAMBytes: plan.Bytes(0.05)}}
	pool := func() []plan.Node { return tiny }
	e := newEnv(t, func(e *testEnv) {
		e.deps.Pool = pool
		pl, err := plan.New(plan.Config{Pool: pool, Headers: plan.ReadHeaders(e.client), DownloadURL: e.client.DownloadURL})
		if err != nil {
			t.Fatal(err)
		}
		e.deps.Planner = pl
	})
	const repo, file = "acme/Big-GGUF", "big-Q4_K_M.gguf"
	e.addModel(repo, hubtest.RepoOptions{}, map[string]ggufgen.Spec{file: {PadTo: 64 << 20}})

	j := MustEnd(t, e.srv, MustStart(t, e.srv, Request{Repo: repo, Replicas: 1}).ID)
	st, _ := j.Step(StepPlan)
	want := "big-Q4_K_M does not fit on the CPU: needs "
	if j.State != Failed || st.State != Failed || !strings.HasPrefix(j.Error, want) ||
		!strings.Contains(j.Error, "and the most any node has is 107.4 MB") {
		t.Fatalf("job ended %s at plan %s: %q; want it refused there: %q…", j.State, st.State, j.Error, want)
	}
	if mir, _ := j.Step(StepMirror); mir.State != "" && mir.State != Skipped {
		t.Errorf("the mirror step ran: %+v", mir)
	}
	if served := e.hub.BytesServed(repo, file); served > 8<<20 {
		t.Errorf("the registry served %d bytes of a file refused at the plan step; want its header alone", served)
	}
	if ms, _ := e.catalog.List(context.Background()); len(ms) != 0 {
		t.Errorf("a refused model is in the catalog: %+v", ms)
	}
}

// TestRequestJSON: the API's request body as the server reads it. "tp",
// gpus_per_node's older name in the reference pipeline, is taken for it.
func TestRequestJSON(t *testing.T) {
	for _, tc := range []struct {
		body    string
		longest bool
		ctx     int
		gpus    int
		err     string
	}{
		{body: `{"repo": "a/b", "context_length": "max"}`, longest: true},
		{body: `{"repo": "a/b", "context_length": 8192}`, ctx: 8192},
		{body: `{"repo": "a/b"}`},
		{body: `{"repo": "a/b", "context_length": "lots"}`, err: `context_length is a number of tokens, or "max" for the longest that fits, not "lots"`},
		{body: `{"repo": "a/b", "contex_length": 8192}`, err: `unknown field "contex_length"`},
		{body: `{"repo": "a/b", "tp": 2}`, gpus: 2},
		{body: `{"repo": "a/b", "gpus_per_node": 4}`, gpus: 4},
		{body: `{"repo": "a/b", "tp": 2, "gpus_per_node": 2}`, gpus: 2},
		{body: `{"repo": "a/b", "gpus_per_node": 4, "tp": 2}`,
			err: "tp is gpus_per_node's older name, and the request gives 2 for one and 4 for the other: give gpus_per_node alone"},
	} {
		var r Request
		err := json.Unmarshal([]byte(tc.body), &r)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want %q", tc.body, err, tc.err)
			}
		case err != nil || r.Longest != tc.longest || r.ContextLength != tc.ctx || r.GPUsPerNode != tc.gpus || r.Repo != "a/b":
			t.Errorf("%s: %+v (%v)", tc.body, r, err)
		}
	}
	// What the server keeps of a job reads back the same.
	b, _ := json.Marshal(Request{Repo: "a/b", Longest: true})
	var back Request
	if err := json.Unmarshal(b, &back); err != nil || !back.Longest {
		t.Errorf("%s read back as %+v (%v)", b, back, err)
	}
}

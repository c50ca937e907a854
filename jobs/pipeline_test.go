package jobs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/gguf"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/plan"
)

// TestServe serves a model from the Hub through every step, watching its
// events, and finds it in the catalog as a user would: its source on the
// mirror, its context, the engine's sizing flags and where it came from.
func TestServe(t *testing.T) {
	pooling := uint32(1)
	cases := []struct {
		name string
		spec ggufgen.Spec
		req  Request
		// memory is the node's RAM; 0 leaves it unknown.
		memory int64
		// wantCtx and wantParallel are the context and slots; 0 checks
		// them against the memory instead.
		wantCtx, wantParallel int
		wantEmbedding         bool
	}{
		{name: "the default pool, never grown to the trained context", spec: ggufgen.Spec{ContextLength: 8192},
			memory: 64 << 30, wantCtx: 4096, wantParallel: 4},
		{name: "the longest context that fits, when asked", spec: ggufgen.Spec{ContextLength: 8192},
			req: Request{Longest: true}, memory: 64 << 30, wantCtx: 8192, wantParallel: 4},
		{name: "a model trained for less than a slot", spec: ggufgen.Spec{ContextLength: 2048},
			memory: 64 << 30, wantCtx: 2048, wantParallel: 4},
		{name: "context as asked", spec: ggufgen.Spec{ContextLength: 8192},
			req: Request{CtxPool: 4096, ContextLength: 2048}, memory: 64 << 30, wantCtx: 2048, wantParallel: 2},
		{name: "memory unknown takes the default", spec: ggufgen.Spec{ContextLength: 32768},
			wantCtx: 4096, wantParallel: 4},
		{name: "embedding model gets many small slots", spec: ggufgen.Spec{ContextLength: 8192, Pooling: &pooling},
			memory: 64 << 30, wantCtx: 1024, wantParallel: 32, wantEmbedding: true},
		{name: "the default cut to the node's free memory", spec: ggufgen.Spec{ContextLength: 1 << 20},
			memory: 190 << 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var opts []envOption
			if tc.memory > 0 {
				opts = append(opts, withNodeMemory(tc.memory))
			}
			e := newEnv(t, opts...)
			const repo, file = "acme/Tiny-GGUF", "tiny-Q4_K_M.gguf"
			content := ggufgen.Bytes(tc.spec)
			e.hub.AddRepo(repo, hubtest.RepoOptions{})
			e.hub.AddFile(repo, "README.md", []byte("# tiny"))
			e.hub.AddFile(repo, "tiny-Q8_0.gguf", ggufgen.Bytes(tc.spec))
			commit := e.hub.AddFile(repo, file, content)

			events, stop := e.srv.Subscribe("")
			defer stop()
			req := tc.req
			req.Repo, req.Replicas = repo, 1
			j := MustStart(t, e.srv, req)
			if j.State != Running || j.Kind != KindServe || !strings.HasPrefix(j.ID, "serve-") {
				t.Fatalf("Start returned %+v; want a running serve job", j)
			}
			end := MustEnd(t, e.srv, j.ID)
			if end.State != Done {
				t.Fatalf("job ended %s: %s; steps %+v", end.State, end.Error, end.Steps)
			}

			// Every step, in order, as a watcher saw them.
			var seen []string
			for len(events) > 0 {
				ev := <-events
				for _, st := range ev.Job.Steps {
					if !slices.Contains(seen, st.Name) {
						seen = append(seen, st.Name)
					}
				}
			}
			want := []string{StepRegistry, StepPlan, StepMirror, StepCheck, StepCatalog, StepPlacement, StepSmoke}
			if !slices.Equal(seen, want) {
				t.Errorf("steps seen %v, want %v", seen, want)
			}
			for _, st := range end.Steps {
				wantState := Done
				if st.Name == StepPlacement || st.Name == StepSmoke {
					wantState = Skipped
				}
				if st.State != wantState {
					t.Errorf("step %s ended %s (%s), want %s", st.Name, st.State, st.Detail, wantState)
				}
			}
			if d := MustStep(t, end, StepRegistry).Detail; d != repo+" at "+commit[:7]+": 3 files" {
				t.Errorf("registry says %q", d)
			}
			if d := MustStep(t, end, StepPlan).Detail; !strings.HasPrefix(d, "Q4_K_M, ") || !strings.HasSuffix(d, "revision "+commit[:7]+"; runs on cpu") {
				t.Errorf("plan says %q", d)
			}
			if d := MustStep(t, end, StepMirror).Detail; !strings.HasSuffix(d, "on the mirror, checksums match the registry") {
				t.Errorf("mirror says %q", d)
			}
			if d := MustStep(t, end, StepPlacement).Detail; d != "no fleet is configured: the model is in the catalog, and nothing starts it here" {
				t.Errorf("placement says %q", d)
			}
			if end.Commit != commit || end.Model != "tiny" || end.Finished.IsZero() {
				t.Errorf("job commit %q model %q finished %v", end.Commit, end.Model, end.Finished)
			}

			m, err := e.catalog.Get(context.Background(), "tiny")
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(m.Source)
			if err != nil {
				t.Fatalf("the catalog's source %q: %v", m.Source, err)
			}
			if !strings.HasPrefix(m.Source, e.mirrorDir) || filepath.Base(m.Source) != file || string(got) != string(content) {
				t.Errorf("source %s is not the file on the mirror", m.Source)
			}
			sum := sha256.Sum256(content)
			wantOrigin := catalog.Origin{Repo: repo, Revision: commit,
				Files: []catalog.OriginFile{{Path: file, Bytes: int64(len(content)), SHA256: hex.EncodeToString(sum[:])}}}
			if m.Origin == nil || m.Origin.Repo != wantOrigin.Repo || m.Origin.Revision != wantOrigin.Revision ||
				!slices.Equal(m.Origin.Files, wantOrigin.Files) {
				t.Errorf("origin %+v, want %+v", m.Origin, wantOrigin)
			}
			if m.Scaling != (catalog.Scaling{Min: 1, Max: 1}) || len(m.Profiles) != 1 || m.Profiles[0].Name != "cpu" {
				t.Fatalf("scaling %+v profiles %+v", m.Scaling, m.Profiles)
			}
			prof := m.Profiles[0]
			pool, parallel := prof.Pool, prof.Slots
			if pool != m.ContextLength*parallel || prof.Context() != m.ContextLength {
				t.Errorf("a pool of %d is not %d slots of %d", pool, parallel, m.ContextLength)
			}
			if m.MaxOutput != catalog.MaxOutput(m.ContextLength) {
				t.Errorf("max output %d for a context of %d", m.MaxOutput, m.ContextLength)
			}
			if prof.Embeddings != tc.wantEmbedding || m.Capabilities.Embeddings != tc.wantEmbedding {
				t.Errorf("profile %+v, embeddings %v; want embedding %v", prof, m.Capabilities.Embeddings, tc.wantEmbedding)
			}
			// The reservation is the sizing the engine starts with, to the
			// byte: what the fleet will place it by.
			h, err := gguf.Read(context.Background(), m.Source)
			if err != nil {
				t.Fatal(err)
			}
			if want := h.MemoryBytes(int64(len(content)), pool, parallel, 0) + prof.PromptCacheBytes; prof.RAMBytes != want {
				t.Errorf("the profile reserves %d bytes; the engine's pool and its prompt cache of %d need %d", prof.RAMBytes, prof.PromptCacheBytes, want)
			}
			if budget := plan.PromptCacheSlots * int64(m.ContextLength) * h.KVBytesPerToken(); prof.PromptCacheBytes > budget || prof.PromptCacheBytes%(1<<20) != 0 {
				t.Errorf("a prompt cache of %d bytes; want at most %d slots' KV cache (%d), in whole MiB", prof.PromptCacheBytes, plan.PromptCacheSlots, budget)
			}
			if tc.wantCtx > 0 {
				if m.ContextLength != tc.wantCtx || parallel != tc.wantParallel {
					t.Errorf("context %d in %d slots, want %d in %d", m.ContextLength, parallel, tc.wantCtx, tc.wantParallel)
				}
				return
			}
			// Cut to the memory: shorter than the default, in steps of
			// 1024, and the whole pool fits the node.
			if pool >= 16384 || m.ContextLength%1024 != 0 || m.ContextLength == 0 {
				t.Errorf("context %d for a model trained for %d in %d bytes", m.ContextLength, h.ContextLength, tc.memory)
			}
			if need := h.MemoryBytes(int64(len(content)), pool, parallel, 0); need > tc.memory {
				t.Errorf("a pool of %d in %d slots needs %d bytes, more than the node's %d", pool, parallel, need, tc.memory)
			}
			if d := MustStep(t, end, StepCheck).Detail; !strings.Contains(d, "cut to fit") {
				t.Errorf("check says %q; want it to say the context was cut", d)
			}
		})
	}
}

// TestServeOnDemand adds a model with no replicas: the catalog says it
// loads when first asked for, and placement is skipped saying why.
func TestServeOnDemand(t *testing.T) {
	e := newEnv(t, withNodeMemory(64<<30))
	e.addModel("acme/Tiny-GGUF", hubtest.RepoOptions{}, map[string]ggufgen.Spec{"tiny-Q4_K_M.gguf": {}})
	j := MustEnd(t, e.srv, MustStart(t, e.srv, Request{Repo: "acme/Tiny-GGUF", Name: "small", Aliases: []string{"wee"}}).ID)
	if j.State != Done {
		t.Fatalf("job ended %s: %s", j.State, j.Error)
	}
	if d := MustStep(t, j, StepCatalog).Detail; d != "small added on demand: it loads when first asked for" {
		t.Errorf("catalog says %q", d)
	}
	if st, ok := j.Step(StepPlacement); !ok || st.State != Skipped {
		t.Errorf("placement ran, or did not say it started nothing, for an on-demand model: %+v", j.Steps)
	}
	m, err := e.catalog.Get(context.Background(), "small")
	if err != nil {
		t.Fatal(err)
	}
	if m.Scaling != (catalog.Scaling{Min: 0, Max: 1}) || !slices.Equal(m.Aliases, []string{"wee"}) {
		t.Errorf("scaling %+v aliases %v", m.Scaling, m.Aliases)
	}
}

// TestServeWithAnIdleTime writes the request's idle_after into the
// catalog entry, where the fleet reads it; "0" is the default.
func TestServeWithAnIdleTime(t *testing.T) {
	e := newEnv(t, withNodeMemory(64<<30))
	e.addModel("acme/Tiny-GGUF", hubtest.RepoOptions{}, map[string]ggufgen.Spec{"tiny-Q4_K_M.gguf": {}})
	for _, tc := range []struct {
		name, idle string
		want       time.Duration
	}{
		{"quick", "30s", 30 * time.Second},
		{"default", "0", 0},
	} {
		var req Request
		body := `{"repo": "acme/Tiny-GGUF", "name": "` + tc.name + `", "replicas": 0, "idle_after": "` + tc.idle + `"}`
		if err := json.Unmarshal([]byte(body), &req); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if j := MustEnd(t, e.srv, MustStart(t, e.srv, req).ID); j.State != Done {
			t.Fatalf("%s: job ended %s: %s", tc.name, j.State, j.Error)
		}
		m, err := e.catalog.Get(context.Background(), tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if want := (catalog.Scaling{Min: 0, Max: 1, IdleAfter: tc.want}); m.Scaling != want {
			t.Errorf("%s: scaling %+v, want %+v", tc.name, m.Scaling, want)
		}
	}
}

// TestServeIfAbsent leaves a model someone added meanwhile as it is.
func TestServeIfAbsent(t *testing.T) {
	e := newEnv(t, withNodeMemory(64<<30))
	e.addModel("acme/Tiny-GGUF", hubtest.RepoOptions{}, map[string]ggufgen.Spec{"tiny-Q4_K_M.gguf": {}})
	theirs := catalog.Model{Name: "tiny", Description: "the operator's", ContextLength: 2048,
		Profiles: []catalog.Profile{{Name: "cpu", Engine: EngineLlamaCpp}}, Scaling: catalog.Scaling{Max: 1}}
	if err := e.catalog.Add(context.Background(), theirs, "operator"); err != nil {
		t.Fatal(err)
	}
	j := MustEnd(t, e.srv, MustStart(t, e.srv, Request{Repo: "acme/Tiny-GGUF", Replicas: 1, IfAbsent: true}).ID)
	if j.State != Done || MustStep(t, j, StepCatalog).State != Skipped {
		t.Fatalf("job %s, catalog step %+v", j.State, MustStep(t, j, StepCatalog))
	}
	m, _ := e.catalog.Get(context.Background(), "tiny")
	if m.Description != "the operator's" {
		t.Errorf("the operator's entry was replaced: %+v", m)
	}
}

// TestServeSplitAndProjector serves a split model with a vision projector:
// the joined copy wins over the split one when both exist, the source is
// the shards' directory, and the projector goes into the origin.
func TestServeSplitAndProjector(t *testing.T) {
	e := newEnv(t, withNodeMemory(64<<30))
	const repo = "acme/Vision-GGUF"
	e.hub.AddRepo(repo, hubtest.RepoOptions{})
	dir := t.TempDir()
	shards, err := ggufgen.WriteSplit(dir, "vision-Q8_0", ggufgen.Spec{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range shards {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		e.hub.AddFile(repo, "Q8_0/"+filepath.Base(p), b)
	}
	e.hub.AddFile(repo, "mmproj-vision-f16.gguf", ggufgen.Bytes(ggufgen.Spec{Projector: true}))

	j := MustEnd(t, e.srv, MustStart(t, e.srv, Request{Repo: repo, Quant: "Q8_0", Projector: "mmproj-vision-f16.gguf", Replicas: 1}).ID)
	if j.State != Done {
		t.Fatalf("job ended %s: %s", j.State, j.Error)
	}
	if d := MustStep(t, j, StepPlan).Detail; !strings.Contains(d, " in 3 files,") {
		t.Errorf("plan says %q; want the two shards and the projector", d)
	}
	m, _ := e.catalog.Get(context.Background(), "vision")
	if st, err := os.Stat(m.Source); err != nil || !st.IsDir() || filepath.Base(m.Source) != "Q8_0" {
		t.Errorf("source %q is not the shards' directory (%v)", m.Source, err)
	}
	if m.Origin == nil || len(m.Origin.Files) != 3 || !m.Capabilities.Vision {
		t.Errorf("origin %+v vision %v", m.Origin, m.Capabilities.Vision)
	}
}

// TestFallbacks: asked for fallbacks, the job keeps the plan's next best
// shape as a second profile, lower in priority and sized for the same
// context, and the plan step names both and the memory the first needs.
func TestFallbacks(t *testing.T) {
	nodes := []plan.Node{{Name: "gpu-1", CPUCores: 8, RAMBytes: plan.Bytes(64), FreeRAMBytes: plan.Bytes(60), CPUBandwidthGBs: 20,
		GPUs: []plan.GPU{{Class: "L4", Count: 1, MemoryBytes: plan.Bytes(24), BandwidthGBs: 300, FreeBytes: []int64{plan.Bytes(24)}}}}}
	pool := func() []plan.Node { return nodes }
	e := newEnv(t, func(e *testEnv) {
		e.deps.Pool = pool
		pl, err := plan.New(plan.Config{Pool: pool, Headers: plan.ReadHeaders(e.client), DownloadURL: e.client.DownloadURL})
		if err != nil {
			t.Fatal(err)
		}
		e.deps.Planner = pl
	})
	e.addModel(tinyRepo, hubtest.RepoOptions{}, map[string]ggufgen.Spec{tinyFile: {}})
	j := MustEnd(t, e.srv, MustStart(t, e.srv, Request{Repo: tinyRepo, Fallbacks: true}).ID)
	if j.State != Done {
		t.Fatalf("job ended %s: %s", j.State, j.Error)
	}
	if d := MustStep(t, j, StepPlan).Detail; !strings.Contains(d, "runs on 1×L4, else cpu; needs ") {
		t.Errorf("plan says %q; want both shapes and the memory needed", d)
	}
	m, err := e.catalog.Get(context.Background(), "tiny")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Profiles) != 2 || m.Profiles[0].Name != "gpu-1xl4" || m.Profiles[1].Name != "cpu" ||
		m.Profiles[0].Priority <= m.Profiles[1].Priority {
		t.Fatalf("profiles %+v; want gpu-1xl4 before cpu", m.Profiles)
	}
	for _, p := range m.Profiles {
		if p.Bytes() <= 0 || p.Pool != m.Profiles[0].Pool || p.Slots != m.Profiles[0].Slots {
			t.Errorf("profile %s holds %d bytes with a pool of %d in %d slots; want each sized for the same context", p.Name, p.Bytes(), p.Pool, p.Slots)
		}
	}
}

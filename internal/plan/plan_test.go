package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"modelserve/catalog"
	"regexp"
	"slices"
	"strings"
	"testing"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
	"modelserve/internal/operr"
	"modelserve/internal/words"
)

// Pools the plans are made for, as nodes files declare them.
const (
	fleetNodes = `[
		{"name": "a100", "cpu_cores": 32, "ram_gb": 256, "gpus": [{"class": "A100-80GB", "count": 2}]},
		{"name": "l4", "cpu_cores": 8, "ram_gb": 64, "gpus": [{"class": "L4", "count": 1}]}
	]`
	l4Node  = `[{"name": "l4", "cpu_cores": 8, "ram_gb": 64, "gpus": [{"class": "L4", "count": 1}]}]`
	cpuNode = `[{"name": "cpu", "cpu_cores": 8, "ram_gb": 32}]`
	t4Node  = `[{"name": "small", "cpu_cores": 4, "ram_gb": 16, "gpus": [{"class": "T4", "count": 1}]}]`
)

type repoFile struct {
	path string
	spec ggufgen.Spec
}

func tiny(typ ggufgen.TensorType) ggufgen.Spec { return ggufgen.Spec{TensorType: typ} }

func embedder() ggufgen.Spec {
	mean := uint32(1)
	return ggufgen.Spec{Name: "tiny embedder", ContextLength: 512, Pooling: &mean}
}

func TestPlanRecommends(t *testing.T) {
	llama8B := []repoFile{
		{"Llama-3.1-8B-Instruct-Q4_K_M.gguf", ggufgen.Llama8B()},
		{"Llama-3.1-8B-Instruct-Q8_0.gguf", withType(ggufgen.Llama8B(), ggufgen.Q8_0)},
		{"Llama-3.1-8B-Instruct-F16.gguf", withType(ggufgen.Llama8B(), ggufgen.F16)},
	}
	cases := []struct {
		name  string
		nodes string
		files []repoFile
		req   Request
		// want is the recommended file and shape; "" expects none.
		want, label string
		// reason is the sentence, with %s where a figure in GB goes.
		reason string
		check  func(t *testing.T, pl Plan)
	}{
		{
			name:  "70B Q8_0 takes two 80 GB cards at 65536 tokens",
			nodes: fleetNodes,
			files: []repoFile{
				{"Llama-3.1-70B-Instruct-Q8_0.gguf", withType(ggufgen.Llama70B(), ggufgen.Q8_0)},
				{"Llama-3.1-70B-Instruct-Q4_K_M.gguf", ggufgen.Llama70B()},
			},
			req:  Request{Size: catalog.Size{Pool: 65536}},
			want: "Llama-3.1-70B-Instruct-Q8_0", label: "2×A100-80GB",
			reason: "Q8_0 is the best quality in the repository, and it fits: %s with a 65536-token pool on 2 A100-80GB cards",
			check: func(t *testing.T, pl Plan) {
				one := option(t, pl, "Llama-3.1-70B-Instruct-Q8_0", "1×A100-80GB")
				if one.Fit != FitsNowhere || !regexp.MustCompile(`^does not fit on an A100-80GB: needs \d+\.\d GB on the card for 65536 tokens in 16 slots of 4096, and the most any node has is 85.9 GB$`).MatchString(one.Why) {
					t.Errorf("one card: fit %q, why %q; want it refused for its memory", one.Fit, one.Why)
				}
				// The weights and a 65536-token cache are more than a card;
				// the Q4_K_M beside them is not.
				if q4 := option(t, pl, "Llama-3.1-70B-Instruct-Q4_K_M", "1×A100-80GB"); q4.Fit != FitsNow {
					t.Errorf("Q4_K_M on one card: %s (%s); want it to fit now", q4.Fit, q4.Why)
				}
			},
		},
		{
			name:  "8B at 32768 tokens: F16 fits a 24 GB card",
			nodes: l4Node, files: llama8B, req: Request{Size: catalog.Size{Pool: 32768}},
			want: "Llama-3.1-8B-Instruct-F16", label: "1×L4",
			reason: "F16 is the best quality in the repository, and it fits: %s with a 32768-token pool on an L4",
		},
		{
			name:  "8B at 131072 tokens: only Q4_K_M leaves the card room for the cache",
			nodes: l4Node, files: llama8B, req: Request{Size: catalog.Size{Pool: 131072}},
			want: "Llama-3.1-8B-Instruct-Q4_K_M", label: "1×L4",
			reason: "Q4_K_M is the best quality that fits: %s with a 131072-token pool on an L4; " +
				"Q8_0 needs %s and no card holds it",
			check: func(t *testing.T, pl Plan) {
				for _, q := range []string{"Q8_0", "F16"} {
					if o := option(t, pl, "Llama-3.1-8B-Instruct-"+q, "1×L4"); o.Fit != FitsNowhere || o.LongestContext >= 131072 {
						t.Errorf("%s on the L4: fit %s, longest context %d; want it refused, with less than 131072",
							q, o.Fit, o.LongestContext)
					}
				}
			},
		},
		{
			name:  "a CPU-only pool serves the best that fits its RAM, and says it is slow",
			nodes: cpuNode,
			files: []repoFile{
				{"Qwen2.5-7B-Instruct-Q4_K_M.gguf", ggufgen.Qwen7B()},
				{"Qwen2.5-7B-Instruct-Q8_0.gguf", withType(ggufgen.Qwen7B(), ggufgen.Q8_0)},
			},
			want: "Qwen2.5-7B-Instruct-Q8_0", label: "CPU",
			reason: "Q8_0 is the best quality in the repository, and it fits: %s with a 16384-token pool on the CPU",
			check: func(t *testing.T, pl Plan) {
				if i := slices.IndexFunc(pl.Options, func(o Option) bool { return !o.CPU }); i >= 0 {
					t.Errorf("a pool without cards offered %s", pl.Options[i].Label())
				}
				rec, _ := pl.Recommended()
				got, slow := SlowCPU(rec)
				want := fmt.Sprintf("on the CPU about %.1f tokens a second for one reply: a reply of 500 tokens takes about %.0f seconds; "+
					"a card would be many times faster", rec.TokensPerSecond, 500/rec.TokensPerSecond)
				if !slow || got != want || rec.TokensPerSecond > 3 {
					t.Errorf("SlowCPU = %q, %v; want %q (20 GB/s over about 8 GB is under 3 tokens a second)", got, slow, want)
				}
			},
		},
		{
			name:  "an embedding model is planned with many short slots and no reply speed",
			nodes: cpuNode,
			files: []repoFile{{"tiny-embedder-F32.gguf", embedder()}},
			want:  "tiny-embedder-F32", label: "CPU",
			reason: "F32 is the only GGUF file in the repository, and it fits: %s with a 16384-token pool on the CPU",
			check: func(t *testing.T, pl Plan) {
				rec, _ := pl.Recommended()
				if !pl.Embedding || pl.Size != (catalog.Size{Pool: 32768, Slots: 32}) || rec.TokensPerSecond != 0 || rec.LongestContext != 512 {
					t.Errorf("embedding %v, context %d, parallel %d, tokens/s %.1f, longest %d; want true, 32768, 32, 0, 512",
						pl.Embedding, pl.Size.Pool, pl.Size.Slots, rec.TokensPerSecond, rec.LongestContext)
				}
			},
		},
		{
			name:  "a repository with only F16",
			nodes: t4Node,
			files: []repoFile{{"tiny-F16.gguf", tiny(ggufgen.F16)}},
			want:  "tiny-F16", label: "1×T4",
			reason: "F16 is the only GGUF file in the repository, and it fits: %s with a 16384-token pool on a T4",
		},
		{
			name:  "F32 is left aside while anything else fits",
			nodes: t4Node,
			files: []repoFile{{"tiny-F32.gguf", tiny(ggufgen.F32)}, {"tiny-F16.gguf", tiny(ggufgen.F16)}},
			want:  "tiny-F16", label: "1×T4",
			reason: "F16 is the best quality that fits short of F32, which is served only when nothing else exists: " +
				"%s with a 16384-token pool on a T4",
		},
		{
			name:  "nothing fits a small pool",
			nodes: cpuNode,
			files: []repoFile{{"Llama-3.1-70B-Instruct-Q4_K_M.gguf", ggufgen.Llama70B()}},
			reason: "no file fits this pool with a 16384-token pool: the smallest, Q4_K_M, needs %s, more than " +
				"any node's memory or any card of the pool holds; ask for a shorter context, or add a node that holds it",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, mustNodes(t, tc.nodes))
			w.hub.AddRepo("acme/model", hubtest.RepoOptions{})
			for _, f := range tc.files {
				addSparse(t, w.hub, "acme/model", f.path, f.spec)
			}
			pl, err := w.planner.Plan(context.Background(), w.repo(t, "acme/model"), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			rec, ok := pl.Recommended()
			if got := rec.Artifact + " " + rec.Label(); ok != (tc.want != "") || (ok && got != tc.want+" "+tc.label) {
				t.Fatalf("recommended %q (%v); want %q\noptions: %s", got, ok, tc.want+" "+tc.label, strings.Join(labels(pl.Options), "\n"))
			}
			pattern := "^" + strings.ReplaceAll(regexp.QuoteMeta(tc.reason), "%s", `\d+(\.\d)? [KMG]B`) + "$"
			if !regexp.MustCompile(pattern).MatchString(pl.Reason) {
				t.Errorf("reason:\n%s\nwant:\n%s", pl.Reason, tc.reason)
			}
			// The figure the serve form's bar adds up: the sized bytes, for
			// an option Size sized.
			need := words.GB(rec.NeedGB)
			if rec.Sizing.NeedBytes > 0 {
				need = words.Size(rec.Sizing.NeedBytes)
			}
			if ok && !strings.Contains(pl.Reason, need) {
				t.Errorf("the reason %q does not say the %s the option needs", pl.Reason, need)
			}
			if tc.check != nil {
				tc.check(t, pl)
			}
		})
	}
}

func TestOptionsAreSortedBestFirst(t *testing.T) {
	w := newWorld(t, mustNodes(t, fleetNodes))
	w.hub.AddRepo("acme/model", hubtest.RepoOptions{})
	addSparse(t, w.hub, "acme/model", "Llama-3.1-70B-Instruct-Q8_0.gguf", withType(ggufgen.Llama70B(), ggufgen.Q8_0))
	addSparse(t, w.hub, "acme/model", "Llama-3.1-70B-Instruct-Q4_K_M.gguf", ggufgen.Llama70B())
	pl, err := w.planner.Plan(context.Background(), w.repo(t, "acme/model"), Request{Size: catalog.Size{Pool: 32768}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(pl.Options); i++ {
		a, b := pl.Options[i-1], pl.Options[i]
		if fitRank(a.Fit) > fitRank(b.Fit) || (a.Fit == b.Fit && a.TokensPerSecond < b.TokensPerSecond) {
			t.Errorf("%s %s (%s, %.1f t/s) sorts before %s %s (%s, %.1f t/s)",
				a.Artifact, a.Label(), a.Fit, a.TokensPerSecond, b.Artifact, b.Label(), b.Fit, b.TokensPerSecond)
		}
	}
	// Bandwidth over bytes: one A100's 2039 GB/s over about 40 GB of
	// Q4_K_M is about 50 tokens a second.
	q4 := option(t, pl, "Llama-3.1-70B-Instruct-Q4_K_M", "1×A100-80GB")
	if q4.TokensPerSecond < 40 || q4.TokensPerSecond > 60 {
		t.Errorf("70B Q4_K_M on an A100-80GB: %.1f tokens a second; want about 50", q4.TokensPerSecond)
	}
	if q4.LongestContext != 131072 {
		t.Errorf("70B Q4_K_M on an A100-80GB: longest context %d; want the trained 131072", q4.LongestContext)
	}
}

func TestMixtureOfExpertsReadsOnlyItsActiveExperts(t *testing.T) {
	w := newWorld(t, mustNodes(t, cpuNode))
	w.hub.AddRepo("acme/moe", hubtest.RepoOptions{})
	moe := ggufgen.Spec{Name: "Mixtral-shaped", ContextLength: 32768, EmbeddingLength: 4096, BlockCount: 32,
		FeedForwardLength: 14336, HeadCount: 32, HeadCountKV: 8, VocabSize: 32000,
		ExpertCount: 8, ExpertUsedCount: 2, TensorType: ggufgen.Q4_K, ShapeOnly: true}
	size := addSparse(t, w.hub, "acme/moe", "Mixtral-8x7B-Q4_K_M.gguf", moe)
	pl, err := w.planner.Plan(context.Background(), w.repo(t, "acme/moe"), Request{Size: catalog.Size{Pool: 4096}})
	if err != nil {
		t.Fatal(err)
	}
	cpu := option(t, pl, "Mixtral-8x7B-Q4_K_M", "CPU")
	dense := DefaultCPUBandwidthGBs * 1e9 / float64(size)
	// Mixtral reads about 13 of its 47 billion weights a token.
	if ratio := cpu.TokensPerSecond / dense; ratio < 3 || ratio > 4.5 || pl.Experts != 8 || pl.ExpertsUsed != 2 {
		t.Errorf("%.1f tokens a second, %.1f times a dense model of its size (experts %d of %d); want 3 to 4.5 times",
			cpu.TokensPerSecond, ratio, pl.ExpertsUsed, pl.Experts)
	}
}

func TestSplitSetIsSummedAndReadFromItsFirstShard(t *testing.T) {
	w := newWorld(t, mustNodes(t, l4Node))
	w.hub.AddRepo("acme/split", hubtest.RepoOptions{})
	shards := addSplit(t, w.hub, "acme/split", "Llama-3.1-8B-Instruct-Q4_K_M", ggufgen.Llama8B(), 3)
	// A second set that lacks its middle shard: listed, not planned.
	q8 := addSplit(t, w.hub, "acme/split", "Llama-3.1-8B-Instruct-Q8_0", withType(ggufgen.Llama8B(), ggufgen.Q8_0), 3)
	w.hub.DeleteFile("acme/split", q8[1])
	repo := w.repo(t, "acme/split")
	pl, err := w.planner.Plan(context.Background(), repo, Request{Size: catalog.Size{Pool: 8192}})
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, f := range repo.Files {
		if slices.Contains(shards, f.Path) {
			sum += f.Size
		}
	}
	i := slices.IndexFunc(pl.Sets, func(s SetPlan) bool { return s.Name == "Llama-3.1-8B-Instruct-Q4_K_M" })
	if i < 0 || pl.Sets[i].Bytes != sum || pl.Sets[i].Shards != 3 || !pl.Sets[i].Planned {
		t.Fatalf("sets %+v; want the Q4_K_M set of 3 shards, %d bytes, planned", pl.Sets, sum)
	}
	if o := option(t, pl, "Llama-3.1-8B-Instruct-Q4_K_M", "1×L4"); o.WeightsGB != round2(GiB(sum)) {
		t.Errorf("weights %.2f GB; want the shards' %.2f GB", o.WeightsGB, GiB(sum))
	}
	if w.hub.BytesServed("acme/split", shards[0]) == 0 {
		t.Error("the first shard's header was not read")
	}
	for _, s := range append(shards[1:], q8...) {
		if n := w.hub.BytesServed("acme/split", s); n != 0 {
			t.Errorf("%d bytes of %s were read; only the first shard of a planned set holds the header", n, s)
		}
	}
	j := slices.IndexFunc(pl.Sets, func(s SetPlan) bool { return s.Name == "Llama-3.1-8B-Instruct-Q8_0" })
	if j < 0 || pl.Sets[j].Planned || pl.Sets[j].Note != "not planned: shard(s) 2 of 3 are missing from the repository" ||
		len(pl.For("Llama-3.1-8B-Instruct-Q8_0")) != 0 {
		t.Errorf("the Q8_0 set lacking a shard: %+v; want it listed, not planned, with a note", pl.Sets)
	}
	if rec, ok := pl.Recommended(); !ok || rec.Artifact != "Llama-3.1-8B-Instruct-Q4_K_M" {
		t.Errorf("recommended %q; want the complete set", rec.Artifact)
	}
}

func TestJoinedCopyIsPlannedInPlaceOfItsSplitCopy(t *testing.T) {
	w := newWorld(t, mustNodes(t, cpuNode))
	w.hub.AddRepo("acme/both", hubtest.RepoOptions{})
	addSparse(t, w.hub, "acme/both", "tiny-F16.gguf", tiny(ggufgen.F16))
	addSplit(t, w.hub, "acme/both", "tiny-F16", tiny(ggufgen.F16), 2)
	pl, err := w.planner.Plan(context.Background(), w.repo(t, "acme/both"), Request{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pl.Sets) != 2 || !pl.Sets[0].Planned || pl.Sets[0].Shards != 1 || pl.Sets[1].Planned ||
		pl.Sets[1].Note != "not planned: a split copy of the file above, which is planned in its place" {
		t.Errorf("sets %+v; want the joined copy planned and the split one noted", pl.Sets)
	}
	if w.reads.Load() != 1 || len(pl.For("tiny-F16")) != 1 {
		t.Errorf("%d headers read, options %v; want one header and one CPU option", w.reads.Load(), labels(pl.Options))
	}
}

func TestHeadersAreReadOncePerFile(t *testing.T) {
	w := newWorld(t, mustNodes(t, l4Node))
	w.hub.AddRepo("acme/model", hubtest.RepoOptions{})
	for _, q := range []string{"Q4_K_M", "Q5_K_M", "Q6_K"} {
		addSparse(t, w.hub, "acme/model", "Mistral-7B-Instruct-v0.3-"+q+".gguf", ggufgen.Mistral7B())
	}
	repo := w.repo(t, "acme/model")
	ctx := context.Background()
	if _, err := w.planner.Plan(ctx, repo, Request{}); err != nil {
		t.Fatal(err)
	}
	reads, served := w.reads.Load(), w.served(repo)
	if reads != 3 || served == 0 {
		t.Fatalf("%d headers read, %d bytes; want 3 headers", reads, served)
	}
	// Another context, and several plans at once: nothing read again.
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			_, err := w.planner.Plan(ctx, repo, Request{Size: catalog.Size{Pool: 65536}})
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if w.reads.Load() != reads || w.served(repo) != served || w.planner.cache.len() != 3 {
		t.Errorf("planning again read %d more headers and %d more bytes; want none",
			w.reads.Load()-reads, w.served(repo)-served)
	}
}

func TestUnreadableHeaderIsPlannedOnAnEstimate(t *testing.T) {
	w := newWorld(t, mustNodes(t, cpuNode))
	w.hub.AddRepo("acme/gated", hubtest.RepoOptions{Gated: "manual"})
	size := addSparse(t, w.hub, "acme/gated", "Mistral-7B-Instruct-v0.3-Q4_K_M.gguf", ggufgen.Mistral7B())
	pl, err := w.planner.Plan(context.Background(), w.repo(t, "acme/gated"), Request{})
	if err != nil {
		t.Fatal(err)
	}
	o := option(t, pl, "Mistral-7B-Instruct-v0.3-Q4_K_M", "CPU")
	want := round2(round2(GiB(size)) + round2(round2(GiB(size))*0.5+2))
	if !o.Estimated || o.NeedGB != want || pl.Sets[0].Note != "planned on an estimate: the repository is gated, and its header could not be read with this token" {
		t.Errorf("estimated %v, need %.2f GB, note %q; want an estimate of %.2f GB and a note", o.Estimated, o.NeedGB, pl.Sets[0].Note, want)
	}
	if !strings.Contains(o.MemoryText(), "the header gave no shape") {
		t.Errorf("MemoryText %q does not say it is an estimate", o.MemoryText())
	}
}

func TestOriginalWeightsSpanNodesOnVLLM(t *testing.T) {
	w := newWorld(t, mustNodes(t, `[
		{"name": "n1", "cpu_cores": 32, "ram_gb": 512, "gpus": [{"class": "A100-80GB", "count": 2}]},
		{"name": "n2", "cpu_cores": 32, "ram_gb": 512, "gpus": [{"class": "A100-80GB", "count": 2}]}
	]`))
	w.hub.AddRepo("acme/llama-70b", hubtest.RepoOptions{})
	w.hub.AddFile("acme/llama-70b", "config.json", []byte(`{"architectures": ["LlamaForCausalLM"]}`))
	for i := 1; i <= 4; i++ {
		addZeros(t, w.hub, "acme/llama-70b", fmt.Sprintf("model-%05d-of-00004.safetensors", i), 141<<30/4)
	}
	// A GGUF copy gives the shape the KV cache is worked out from.
	addSparse(t, w.hub, "acme/llama-70b", "gguf/Llama-3.1-70B-Instruct-Q4_K_M.gguf", ggufgen.Llama70B())
	pl, err := w.planner.Plan(context.Background(), w.repo(t, "acme/llama-70b"), Request{Size: catalog.Size{Pool: 32768}, Format: FormatSafetensors})
	if err != nil {
		t.Fatal(err)
	}
	got := labels(pl.For(Original))
	if len(got) != 3 || pl.Options[0].Label() != "2 nodes × 2×A100-80GB" || pl.Options[0].Fit != FitsNow ||
		pl.Options[0].Engine != EngineVLLM || pl.Options[0].KVGB != 10 {
		t.Fatalf("options %v; want 1 and 2 cards refused, then 2 nodes of 2 fitting now with a 10 GB cache", got)
	}
	if o := option(t, pl, Original, "2×A100-80GB"); o.Fit != FitsNowhere {
		t.Errorf("two cards on one node: %s; want refused", o.Fit)
	}
	// Planned, so the operator sees what it takes; refused as a layout, as
	// no fleet starts vLLM over nodes.
	_, err = ChooseLayout(LayoutRequest{Format: FormatSafetensors}, pl, true, pl.Sets[0].FileSet)
	if msg, _ := operr.Sentence(err); !strings.HasPrefix(msg, "the original weights need 2 nodes of 2×A100-80GB; multi-node serving is not supported yet") {
		t.Errorf("ChooseLayout: %v; want the multi-node refusal", err)
	}
	if _, ok := pl.Recommended(); ok {
		t.Error("a plan of original weights recommended a GGUF file")
	}
}

func TestChooseLayout(t *testing.T) {
	w := newWorld(t, mustNodes(t, fleetNodes))
	w.hub.AddRepo("acme/model", hubtest.RepoOptions{})
	addSparse(t, w.hub, "acme/model", "Llama-3.1-70B-Instruct-Q8_0.gguf", withType(ggufgen.Llama70B(), ggufgen.Q8_0))
	addSparse(t, w.hub, "acme/model", "Llama-3.1-8B-Instruct-Q4_K_M.gguf", ggufgen.Llama8B())
	repo := w.repo(t, "acme/model")
	pl, err := w.planner.Plan(context.Background(), repo, Request{Size: catalog.Size{Pool: 65536}})
	if err != nil {
		t.Fatal(err)
	}
	small, err := w.planner.Plan(context.Background(), repo, Request{Size: catalog.Size{Pool: 65536}})
	if err != nil {
		t.Fatal(err)
	}
	small.Options = slices.DeleteFunc(small.Options, func(o Option) bool { return o.Fit != FitsNowhere })
	set := func(name string) (s SetPlan) {
		for _, s := range pl.Sets {
			if s.Name == name {
				return s
			}
		}
		t.Fatalf("no set %s", name)
		return
	}
	q8, q4 := set("Llama-3.1-70B-Instruct-Q8_0").FileSet, set("Llama-3.1-8B-Instruct-Q4_K_M").FileSet
	cases := []struct {
		name    string
		req     LayoutRequest
		plan    Plan
		planned bool
		set     hf.FileSet
		want    []string
		err     string
		exists  bool
	}{
		{name: "the plan's best for the file", req: LayoutRequest{}, plan: pl, planned: true,
			set: q8, want: []string{"2×A100-80GB"}, exists: true},
		{name: "fallbacks add the next shapes that run", req: LayoutRequest{Fallbacks: true}, plan: pl, planned: true,
			set: q4, want: []string{"1×A100-80GB", "1×L4", "CPU"}, exists: true},
		{name: "one card asked for, which the plan refused", req: LayoutRequest{GPUClass: "A100-80GB"}, plan: pl, planned: true,
			set: q8, want: []string{"1×A100-80GB"}, exists: false},
		{name: "the CPU asked for", req: LayoutRequest{CPU: true}, plan: pl, planned: true,
			set: q8, want: []string{"CPU"}, exists: true},
		{name: "a shape the plan did not make", req: LayoutRequest{GPUClass: "H100-80GB", GPUsPerNode: 4}, plan: pl, planned: true,
			set: q8, want: []string{"4×H100-80GB"}, exists: true},
		{name: "llama.cpp across nodes", req: LayoutRequest{GPUClass: "A100-80GB", Nodes: 2}, plan: pl, planned: true,
			set: q8, err: "llama.cpp does not span nodes; serve the original weights with vLLM for that"},
		{name: "original weights on the CPU", req: LayoutRequest{Format: FormatSafetensors, CPU: true}, plan: pl,
			set: q8, err: "original weights run on vLLM, on GPUs; a GGUF file runs on the CPU"},
		{name: "original weights unplanned", req: LayoutRequest{Format: FormatSafetensors},
			set: q8, err: "original weights run on vLLM, on GPUs: name the GPU class"},
		{name: "unplanned GGUF runs on the CPU", req: LayoutRequest{}, set: q4, want: []string{"CPU"}},
		{name: "a file that fits nowhere", req: LayoutRequest{}, plan: small, planned: true, set: q8,
			err: "Llama-3.1-70B-Instruct-Q8_0 does not fit on an A100-80GB: needs 96.1 GB on the card for 65536 tokens in 16 slots of 4096, " +
				"and the most any node has is 85.9 GB; `GET /api/v1/repos/acme/model` shows what each file needs"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ChooseLayout(tc.req, tc.plan, tc.planned, tc.set)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error %v; want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, o := range got {
				names = append(names, o.Label())
			}
			if !slices.Equal(names, tc.want) || HardwareExists(got) != tc.exists {
				t.Errorf("layout %v, hardware exists %v; want %v, %v", names, HardwareExists(got), tc.want, tc.exists)
			}
		})
	}
}

func TestMemoryText(t *testing.T) {
	o := Option{Artifact: "m", Class: "A100-80GB", GPUsPerNode: 2, Nodes: 1, WeightsGB: 69.82, OverheadGB: 0.78}
	got := o.WithContext(327680, 32768).MemoryText()
	// The figures are GiB; the sentence says them in (decimal) GB.
	want := "43.3 GB on each of 2 A100-80GB cards (weights 75 GB + KV cache 10.7 GB for 32768 tokens + engine 837.5 MB)"
	if got != want {
		t.Errorf("MemoryText = %q; want %q", got, want)
	}
}

func TestRepoReport(t *testing.T) {
	w := newWorld(t, mustNodes(t, l4Node))
	w.hub.AddRepo("acme/vision", hubtest.RepoOptions{Gated: "auto"})
	w.hub.AddToken("hf_ok", "acme/vision")
	addSparse(t, w.hub, "acme/vision", "Qwen2.5-7B-Instruct-Q4_K_M.gguf", ggufgen.Qwen7B())
	addSparse(t, w.hub, "acme/vision", "mmproj-F16.gguf", ggufgen.Spec{Projector: true})
	granted, err := hf.NewClient(hf.Options{Endpoint: w.hub.URL(), Token: "hf_ok", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Pool: func() []Node { return mustNodes(t, l4Node) }, Headers: ReadHeaders(granted),
		DownloadURL: w.client.DownloadURL})
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.RepoReport(context.Background(), w.repo(t, "acme/vision"), Request{Size: catalog.Size{Pool: 8192}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Repo       string `json:"repo"`
		Commit     string `json:"commit"`
		Gated      bool   `json:"gated"`
		Projectors []struct {
			Path string `json:"path"`
		} `json:"projectors"`
		Sets []struct {
			Name        string                       `json:"name"`
			Quant       string                       `json:"quant"`
			Bytes       int64                        `json:"bytes"`
			Shards      int                          `json:"shards"`
			Files       []map[string]any             `json:"files"`
			Recommended bool                         `json:"recommended"`
			Options     []map[string]json.RawMessage `json:"options"`
		} `json:"sets"`
		Plan struct {
			Recommended map[string]any `json:"recommended"`
			Reason      string         `json:"reason"`
		} `json:"plan"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Repo != "acme/vision" || got.Commit == "" || !got.Gated || len(got.Projectors) != 1 || got.Projectors[0].Path != "mmproj-F16.gguf" {
		t.Errorf("repo %q commit %q gated %v projectors %v; want acme/vision, a commit, gated, the mmproj file",
			got.Repo, got.Commit, got.Gated, got.Projectors)
	}
	if len(got.Sets) != 1 || got.Sets[0].Quant != "Q4_K_M" || got.Sets[0].Shards != 1 || got.Sets[0].Bytes == 0 ||
		len(got.Sets[0].Files) != 1 || !got.Sets[0].Recommended || len(got.Sets[0].Options) == 0 {
		t.Fatalf("sets %s; want the one Q4_K_M set, recommended, with options", b)
	}
	for _, key := range []string{"artifact", "gpus_per_node", "need_gb", "hosts", "tokens_per_second", "longest_context", "fit"} {
		if _, ok := got.Sets[0].Options[0][key]; !ok {
			t.Errorf("an option has no %q: %s", key, got.Sets[0].Options[0])
		}
	}
	if got.Plan.Recommended["artifact"] != "Qwen2.5-7B-Instruct-Q4_K_M" || got.Plan.Reason == "" {
		t.Errorf("plan recommended %v, reason %q", got.Plan.Recommended, got.Plan.Reason)
	}
}

func TestPlanRefusesBadRequests(t *testing.T) {
	w := newWorld(t, mustNodes(t, cpuNode))
	w.hub.AddRepo("acme/empty", hubtest.RepoOptions{})
	w.hub.AddFile("acme/empty", "README.md", []byte("# nothing"))
	w.hub.AddRepo("acme/gguf", hubtest.RepoOptions{})
	addSparse(t, w.hub, "acme/gguf", "tiny-F16.gguf", tiny(ggufgen.F16))
	cases := []struct {
		name, repo string
		req        Request
		want       string
	}{
		{"no weights", "acme/empty", Request{}, "acme/empty has neither GGUF files nor safetensors weights: nothing here for llama.cpp or vLLM to run"},
		{"unknown format", "acme/gguf", Request{Format: "onnx"}, `the format is gguf or safetensors, not "onnx"`},
		{"negative context", "acme/gguf", Request{Size: catalog.Size{Pool: -1}}, "a pool of -1 tokens in 0 slots cannot be negative: give a pool and slots of at least 1"},
		{"no safetensors", "acme/gguf", Request{Format: FormatSafetensors}, "acme/gguf has no safetensors weights at its top: plan its GGUF files instead"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := w.planner.Plan(context.Background(), w.repo(t, tc.repo), tc.req)
			if err == nil || err.Error() != tc.want {
				t.Errorf("error %v; want %q", err, tc.want)
			}
		})
	}
}

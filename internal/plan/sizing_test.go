package plan

import (
	"context"
	"fmt"
	"modelserve/catalog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"modelserve/internal/gguf"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hf"
	"modelserve/internal/words"
)

var (
	modelsMu sync.Mutex
	models   = map[string]Model{}
)

// mustModel is a model of spec's shape, its weights the file's size (a
// ShapeOnly file: the size of the real one, holes on disk).
func mustModel(t testing.TB, name string, spec ggufgen.Spec) Model {
	t.Helper()
	modelsMu.Lock()
	defer modelsMu.Unlock()
	if m, ok := models[name]; ok {
		return m
	}
	path := filepath.Join(t.TempDir(), name+".gguf")
	if err := ggufgen.WriteFile(path, spec); err != nil {
		t.Fatal(err)
	}
	h, err := gguf.Read(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	m := Model{Header: h, WeightsBytes: int64(len(ggufgen.Bytes(ggufgen.Spec{})))}
	if st, err := fileSize(path); err == nil {
		m.WeightsBytes = st
	}
	models[name] = m
	return m
}

func ramNode(ramGB, freeGB float64) Node {
	return Node{Name: "cpu-1", CPUCores: 16, RAMBytes: Bytes(ramGB), FreeRAMBytes: Bytes(freeGB), CPUBandwidthGBs: 40}
}

func cardNode(class string, count int, memGB float64) Node {
	free := make([]int64, count)
	for i := range free {
		free[i] = Bytes(memGB)
	}
	return Node{Name: "gpu-1", CPUCores: 32, RAMBytes: Bytes(256), FreeRAMBytes: Bytes(200),
		GPUs: []GPU{{Class: class, Count: count, MemoryBytes: Bytes(memGB), FreeBytes: free}}}
}

// withRAM is n with ramGB of RAM, freeGB of it free.
func withRAM(n Node, ramGB, freeGB float64) Node {
	n.RAMBytes, n.FreeRAMBytes = Bytes(ramGB), Bytes(freeGB)
	return n
}

var cpu = Option{CPU: true}

func cards(class string, n int) Option { return Option{Class: class, GPUsPerNode: n, Nodes: 1} }

// TestSize: each case is what the serve page, the API, the job's steps and
// the catalog will show for one model on one shape of hardware.
func TestSize(t *testing.T) {
	llama8B := mustModel(t, "8B", ggufgen.Llama8B())
	f16 := ggufgen.Llama8B()
	f16.TensorType = ggufgen.F16
	llama8BF16 := mustModel(t, "8B-F16", f16)
	llama70B := mustModel(t, "70B", ggufgen.Llama70B())
	embed := mustModel(t, "embed", ggufgen.Spec{ContextLength: 512, Pooling: new(uint32(1))})
	short := mustModel(t, "short", ggufgen.Spec{ContextLength: 2048})

	cases := []struct {
		name  string
		m     Model
		o     Option
		ask   Ask
		nodes []Node
		// What a user sees: the context and slots, where it fits, and
		// words the reason must hold.
		ctx, slots int
		fit        string
		reason     []string
		// needBelow bounds the memory it is placed by, in GiB.
		needBelow float64
		shrunk    bool
	}{
		{name: "8B on an idle 64 GiB node: the default pool",
			m: llama8B, o: cpu, nodes: []Node{ramNode(64, 60)},
			ctx: 4096, slots: 4, fit: FitsNow, needBelow: 8,
			reason: []string{"runs on the CPU: needs ", " of a node's RAM for 16384 tokens in 4 slots of 4096, and a host has 64.4 GB free"}},
		{name: "8B on a 16 GiB node with 6 GiB free: the default shrunk, never grown",
			m: llama8B, o: cpu, nodes: []Node{ramNode(16, 6)},
			ctx: 2048, slots: 4, fit: FitsNow, needBelow: 6, shrunk: true,
			reason: []string{"16384 tokens in 4 slots of 4096 cut to 8192 tokens in 4 slots of 2048 to fit 6.4 GB"}},
		{name: "8B on a 16 GiB node with 6 GiB free, the longest that fits",
			m: llama8B, o: cpu, ask: Ask{Longest: true}, nodes: []Node{ramNode(16, 6)},
			ctx: 8192, slots: 1, fit: FitsNow, needBelow: 6, shrunk: true,
			reason: []string{"the longest context that fits 6.4 GB: 8192 tokens in one slot"}},
		{name: "8B on a busy node: sized to fit when it is free",
			m: llama8B, o: cpu, nodes: []Node{ramNode(16, 1)},
			ctx: 4096, slots: 4, fit: FitsHardware,
			reason: []string{"runs on the CPU when there is room", "a host has 17.2 GB in all, less free now (1.1 GB)"}},
		{name: "8B on an L4, the default pool",
			m: llama8B, o: cards("L4", 1), nodes: []Node{cardNode("L4", 1, 24)},
			ctx: 4096, slots: 4, fit: FitsNow, needBelow: 8, reason: []string{"runs on an L4: needs ", " on the card for 16384 tokens in 4 slots of 4096"}},
		{name: "8B F16 on an L4 asked for 131072 tokens: kept as asked, and refused",
			m: llama8BF16, o: cards("L4", 1), ask: Ask{CtxPool: 131072, ContextLength: 131072}, nodes: []Node{cardNode("L4", 1, 24)},
			ctx: 131072, slots: 1, fit: FitsNowhere,
			reason: []string{"does not fit on an L4: needs ", "on the card for 131072 tokens in one slot, and the most any node has is 25.8 GB"}},
		{name: "70B on 2 A100-80GB",
			m: llama70B, o: cards("A100-80GB", 2), nodes: []Node{cardNode("A100-80GB", 2, 80)},
			ctx: 4096, slots: 4, fit: FitsNow, needBelow: 40, reason: []string{"runs on 2 A100-80GB cards", "on each card"}},
		{name: "70B on an L4 does not fit, even the smallest",
			m: llama70B, o: cards("L4", 1), nodes: []Node{cardNode("L4", 2, 24)},
			ctx: 1024, slots: 1, fit: FitsNowhere, reason: []string{"does not fit on an L4: needs ", "for 1024 tokens in one slot, and the most any node has is 25.8 GB"}},
		{name: "embedding model: many small slots, cut to its trained 512",
			m: embed, o: cpu, nodes: []Node{ramNode(64, 60)},
			ctx: 512, slots: 32, fit: FitsNow, needBelow: 1},
		{name: "a model trained for 2048 tokens: slots of its own context",
			m: short, o: cpu, nodes: []Node{ramNode(64, 60)},
			ctx: 2048, slots: 4, fit: FitsNow, needBelow: 1},
		{name: "a declared card the table does not know: its declared memory",
			m: llama8B, o: cards("Z9-48GB", 1), nodes: []Node{cardNode("Z9-48GB", 1, 48)},
			ctx: 4096, slots: 4, fit: FitsNow, reason: []string{"a host has 51.5 GB free"}},
		{name: "8B on an L4 whose node has too little RAM beside it: refused",
			m: llama8B, o: cards("L4", 1), nodes: []Node{withRAM(cardNode("L4", 1, 24), 0.5, 0.5)},
			ctx: 4096, slots: 4, fit: FitsNowhere,
			reason: []string{"does not fit on an L4: a replica holds ", " of its node's RAM beside its cards, and the most a node with the cards has is 536.9 MB"}},
		{name: "8B on an L4 whose node's RAM is busy: when there is room",
			m: llama8B, o: cards("L4", 1), nodes: []Node{withRAM(cardNode("L4", 1, 24), 64, 0.5)},
			ctx: 4096, slots: 4, fit: FitsHardware,
			reason: []string{"runs on an L4 when there is room: a replica holds ", " of its node's RAM beside its cards, and a node with the cards free has 536.9 MB free now"}},
		{name: "no pool to ask: sized as asked, not refused",
			m: llama8B, o: cpu, ctx: 4096, slots: 4, fit: FitsNow, reason: []string{"what the nodes have free is not known"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := Size(tc.m, tc.o, tc.ask, tc.nodes)
			if s.Size != catalog.SizeForSlots(tc.slots, tc.ctx) || s.Fit != tc.fit || s.Shrunk != tc.shrunk {
				t.Errorf("sized %d slots of %d (pool %d), fit %s, shrunk %v; want %d of %d, %s, %v\nreason: %s",
					s.Size.Slots, s.Size.Context(), s.Size.Pool, s.Fit, s.Shrunk, tc.slots, tc.ctx, tc.fit, tc.shrunk, s.Reason)
			}
			for _, w := range tc.reason {
				if !strings.Contains(s.Reason, w) {
					t.Errorf("reason %q does not say %q", s.Reason, w)
				}
			}
			if sum := s.WeightsBytes + s.KVBytes + s.ComputeBytes + s.ProjectorBytes; sum != s.NeedBytes || (tc.o.CPU && s.ComputeBytes <= 0) {
				t.Errorf("parts %d + %d + %d + %d do not add up to the need %d", s.WeightsBytes, s.KVBytes, s.ComputeBytes, s.ProjectorBytes, s.NeedBytes)
			}
			if tc.needBelow > 0 && float64(s.NeedBytes-s.PromptCacheBytes) > tc.needBelow*(1<<30) {
				t.Errorf("needs %s beside its prompt cache, more than %.0f GiB", words.Size(s.NeedBytes-s.PromptCacheBytes), tc.needBelow)
			}
			if s.Fit == FitsNow && s.RoomBytes > 0 && s.NeedBytes > s.RoomBytes {
				t.Errorf("fits now, but needs %d of %d", s.NeedBytes, s.RoomBytes)
			}
			t.Logf("%s", s.Reason)
		})
	}
}

// TestSizeIsWhatTheEngineGets: the memory is the same figure however it is
// asked for: the default and the same pool asked outright agree.
func TestSizeIsWhatTheEngineGets(t *testing.T) {
	m := mustModel(t, "8B", ggufgen.Llama8B())
	nodes := []Node{ramNode(64, 60)}
	def := Size(m, cpu, Ask{}, nodes)
	asked := Size(m, cpu, Ask{CtxPool: def.Size.Pool, ContextLength: def.Size.Context()}, nodes)
	if def.NeedBytes != asked.NeedBytes || def.KVBytes != asked.KVBytes {
		t.Errorf("the default needs %d (KV %d), the same pool asked for %d (KV %d)", def.NeedBytes, def.KVBytes, asked.NeedBytes, asked.KVBytes)
	}
	if want := m.Header.MemoryBytes(m.WeightsBytes, def.Size.Pool, def.Size.Slots, 0) + def.PromptCacheBytes; def.NeedBytes != want {
		t.Errorf("needs %d, the header's estimate for that pool and its prompt cache is %d", def.NeedBytes, want)
	}
}

// TestPromptCacheIsCountedAndNeverCostsContext: the engine's prompt cache
// is a budget of several prompts as long as a slot where there is room,
// counted in what a CPU replica is placed by and said in the sizing's
// sentence; it takes no more than a share of what the node spares beside
// the replica (one slot's worth while that fits), and where room is short
// the context keeps what it had without one and the cache has what is
// left; a judge and an embedding model keep none; on cards it is in the
// node's RAM beside them, within what that RAM spares; and a replica's
// reserved RAM holds it beside the rest.
func TestPromptCacheIsCountedAndNeverCostsContext(t *testing.T) {
	m := mustModel(t, "8B", ggufgen.Llama8B())
	slotKV := func(s Sizing) int64 { return int64(s.Size.Context()) * m.Header.KVBytesPerToken() }

	roomy := Size(m, cpu, Ask{}, []Node{ramNode(64, 60)})
	if want := wholeMiB(PromptCacheSlots * slotKV(roomy)); roomy.PromptCacheBytes != want || want <= slotKV(roomy) {
		t.Errorf("with room, a prompt cache of %d; want %d prompts as long as a slot, %d", roomy.PromptCacheBytes, PromptCacheSlots, want)
	}
	if roomy.PromptCacheBytes%(1<<20) != 0 {
		t.Errorf("a prompt cache of %d bytes is not whole MiB, what --cache-ram takes", roomy.PromptCacheBytes)
	}
	if said := fmt.Sprintf("; of that, a prompt cache of %s for about %d prompts of 4096 tokens", words.Size(roomy.PromptCacheBytes), PromptCacheSlots); !strings.HasSuffix(roomy.Reason, said) {
		t.Errorf("the sizing says %q; want it to end %q", roomy.Reason, said)
	}

	// Bounded by what the node spares beside the replica.
	without := roomy.NeedBytes - roomy.PromptCacheBytes
	slot := slotKV(roomy)
	for _, tc := range []struct {
		name  string
		spare int64
		want  int64
	}{
		{"a quarter of a spare of 12 slots", 12 * slot, 3 * slot},
		{"one slot's worth of a spare of 2 slots", 2 * slot, slot},
		{"what is left of a spare of half a slot", slot / 2, wholeMiB(slot / 2)},
		{"none with nothing to spare", 0, 0},
	} {
		free := without + tc.spare
		s := Size(m, cpu, Ask{}, []Node{{Name: "n", CPUCores: 16, RAMBytes: free, FreeRAMBytes: free}})
		if s.Size != roomy.Size || s.PromptCacheBytes != tc.want || s.NeedBytes != without+tc.want || s.NeedBytes > free {
			t.Errorf("%s: %s with a cache of %d, needing %d of %d; want %s, a cache of %d counted in the need",
				tc.name, s.Size.Words(), s.PromptCacheBytes, s.NeedBytes, free, roomy.Size.Words(), tc.want)
		}
	}

	tight := Size(m, cpu, Ask{Longest: true}, []Node{ramNode(16, 6)})
	if tight.Size != catalog.SizeForSlots(1, 8192) {
		t.Errorf("on 6 GB free the longest is %s; want 1 slot of 8192, as without a cache", tight.Size.Words())
	}
	if tight.NeedBytes > Bytes(6) || tight.PromptCacheBytes >= slotKV(tight) {
		t.Errorf("needs %d with a cache of %d on 6 GB: want the cache only what the room leaves, less than a slot's %d", tight.NeedBytes, tight.PromptCacheBytes, slotKV(tight))
	}

	for name, ask := range map[string]Ask{"a judge": {Judge: true}, "embeddings": {Embeddings: true}} {
		if s := Size(m, cpu, ask, []Node{ramNode(64, 60)}); s.PromptCacheBytes != 0 {
			t.Errorf("%s: a prompt cache of %d, want none", name, s.PromptCacheBytes)
		}
	}

	card := Size(m, cards("L4", 1), Ask{}, []Node{cardNode("L4", 1, 24)})
	if want := m.Header.CardBytes(m.WeightsBytes, card.Size.Pool, card.Size.Slots, 1); card.NeedBytes != want || card.PromptCacheBytes != roomy.PromptCacheBytes {
		t.Errorf("on a card: needs %d with a cache of %d; want the card's %d, the cache of %d in RAM beside it", card.NeedBytes, card.PromptCacheBytes, want, roomy.PromptCacheBytes)
	}
	if !strings.Contains(card.Reason, "; beside it in the node's RAM, a prompt cache of "+words.Size(card.PromptCacheBytes)) {
		t.Errorf("on a card the sizing says %q, not its prompt cache", card.Reason)
	}
	host := card.HostBytes - card.PromptCacheBytes
	short := withRAM(cardNode("L4", 1, 24), GiB(host+slot), GiB(host+slot))
	if s := Size(m, cards("L4", 1), Ask{}, []Node{short}); s.Fit != FitsNow || s.PromptCacheBytes != wholeMiB(slot) || s.HostBytes > short.FreeRAMBytes {
		t.Errorf("on a card whose node spares a slot's worth of RAM: %s with a cache of %d, holding %d of %d; want it to fit with a cache of %d",
			s.Fit, s.PromptCacheBytes, s.HostBytes, short.FreeRAMBytes, wholeMiB(slot))
	}

	c := Choice{Set: hf.FileSet{Name: "m-Q4_K_M"}, Layouts: []Option{cpu}}
	sz, profiles, err := c.Serve(m, Ask{}, []Node{ramNode(64, 60)}, Extra{MemoryBytes: sz8BWithout(t, m) + 3<<20 + 1000})
	if err != nil {
		t.Fatal(err)
	}
	if p := profiles[0]; p.PromptCacheBytes != 3<<20 || sz.PromptCacheBytes <= p.PromptCacheBytes {
		t.Errorf("reserved 3 MiB past the engine's need: a cache of %d (sized %d); want 3 MiB", p.PromptCacheBytes, sz.PromptCacheBytes)
	}
}

// sz8BWithout is the default pool's need for m with no prompt cache.
func sz8BWithout(t *testing.T, m Model) int64 {
	t.Helper()
	s := Size(m, cpu, Ask{}, []Node{ramNode(64, 60)})
	return s.NeedBytes - s.PromptCacheBytes
}

func fileSize(path string) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// FuzzSize: whatever a request and the nodes say, sizing returns figures
// that add up, a pool the engine can be started with, and a verdict; it
// never panics or overflows.
func FuzzSize(f *testing.F) {
	m := mustModel(f, "8B", ggufgen.Llama8B())
	f.Add(0, 0, false, 64.0, 60.0, 0, 0.0)
	f.Add(131072, 131072, false, 16.0, 6.0, 1, 24.0)
	f.Add(1<<30, 1, true, 1e9, -5.0, 8, 80.0)
	f.Add(-1, -7, false, 0.0, 0.0, 0, 0.0)
	f.Fuzz(func(t *testing.T, pool, ctx int, longest bool, ram, free float64, cardCount int, cardGB float64) {
		nodes := []Node{{Name: "n", CPUCores: 8, RAMBytes: Bytes(ram), FreeRAMBytes: Bytes(free)}}
		if cardCount = min(max(cardCount, 0), 8); cardCount > 0 {
			frees := make([]int64, cardCount)
			for i := range frees {
				frees[i] = Bytes(cardGB)
			}
			nodes[0].GPUs = []GPU{{Class: "L4", Count: cardCount, MemoryBytes: Bytes(cardGB), FreeBytes: frees}}
		}
		for _, o := range []Option{cpu, cards("L4", max(cardCount, 1))} {
			s := Size(m, o, Ask{CtxPool: pool, ContextLength: ctx, Longest: longest}, nodes)
			if s.Size.Slots < 1 || s.Size.Context() < 1 || s.Size.Check() != nil || s.Size.Pool%s.Size.Slots != 0 {
				t.Fatalf("%+v: %s", o, s.Size.Words())
			}
			if s.NeedBytes <= 0 || s.WeightsBytes+s.KVBytes+s.ComputeBytes+s.ProjectorBytes != s.NeedBytes {
				t.Fatalf("%+v: parts do not add up: %+v", o, s)
			}
			switch s.Fit {
			case FitsNow, FitsHardware, FitsNowhere:
			default:
				t.Fatalf("fit %q", s.Fit)
			}
			if s.Reason == "" {
				t.Fatal("no reason")
			}
		}
	})
}

// The serve form, the API and the job divide a pool by asking Shape: a
// pool alone is slots of the default size, an embedding model's small ones.
func TestAskShape(t *testing.T) {
	for _, c := range []struct {
		ask        Ask
		ctx, slots int
	}{
		{Ask{CtxPool: 65536}, 4096, 16},
		{Ask{CtxPool: 65536, Embeddings: true}, 1024, 64},
		{Ask{CtxPool: 65536, ContextLength: 16384}, 16384, 4},
		{Ask{CtxPool: 2048}, 2048, 1},
		{Ask{ContextLength: 32768}, 32768, 1},
		{Ask{CtxPool: 1 << 30}, 4096, MaxSlots},
	} {
		if got := c.ask.Shape(); got != catalog.SizeForSlots(c.slots, c.ctx) {
			t.Errorf("%+v: %s, want %d slots of %d", c.ask, got.Words(), c.slots, c.ctx)
		}
	}
}

// TestServeSizesEachProfileForItsCards: the catalog's profiles from one
// choice are each sized for the first's context on their own hardware: on
// K cards a profile holds its per-card need on each (not the cards' total,
// nor the total split again), a fallback on a different card count holds
// its own per-card need, a CPU fallback holds RAM, and the request's own
// figure stands for the first profile only.
func TestServeSizesEachProfileForItsCards(t *testing.T) {
	m := mustModel(t, "serve-cards", ggufgen.Spec{ContextLength: 32768})
	nodes := []Node{cardNode("L4", 4, 24), ramNode(64, 60)}
	c := Choice{Set: hf.FileSet{Name: "m-Q4_K_M"}, Layouts: []Option{cards("L4", 2), cards("L4", 4), cpu}}
	ask := Ask{CtxPool: 16384, ContextLength: 4096, Judge: true}
	sz, profiles, err := c.Serve(m, ask, nodes, Extra{MemoryBytes: 8 << 30, Cores: func(int64) int { return 3 }})
	if err != nil {
		t.Fatal(err)
	}
	if len(profiles) != 3 {
		t.Fatalf("profiles %+v, want the first and both fallbacks", profiles)
	}
	two, four, ram := profiles[0], profiles[1], profiles[2]
	if two.Name != "gpu-2xl4" || two.Cards() != 2 || two.CardBytes != sz.NeedBytes || two.RAMBytes != sz.HostBytes {
		t.Errorf("the 2-card profile %+v, want %d bytes on each of 2 cards and its host's %d of RAM", two, sz.NeedBytes, sz.HostBytes)
	}
	want4 := Size(m, cards("L4", 4), ask, nodes).NeedBytes
	if four.Name != "gpu-4xl4" || four.Cards() != 4 || four.CardBytes != want4 || four.CardBytes >= two.CardBytes {
		t.Errorf("the 4-card fallback %+v, want its own %d bytes a card, less than the 2-card's %d", four, want4, two.CardBytes)
	}
	if ram.Name != "cpu" || ram.RAMBytes != Size(m, cpu, ask, nodes).NeedBytes || ram.CPUCores != 3 || ram.CardBytes != 0 {
		t.Errorf("the CPU fallback %+v, want its RAM sizing (the request's figure is the first profile's) and 3 cores", ram)
	}
	for _, p := range profiles {
		if p.Pool != 16384 || p.Slots != 4 || p.Context() != 4096 || !p.Judge || p.Priority == 0 {
			t.Errorf("profile %s: pool %d in %d slots, judge %v, priority %d; want all sized for one context", p.Name, p.Pool, p.Slots, p.Judge, p.Priority)
		}
	}
	if profiles[0].Priority <= profiles[1].Priority || profiles[1].Priority <= profiles[2].Priority {
		t.Errorf("priorities %d, %d, %d: want the first highest", profiles[0].Priority, profiles[1].Priority, profiles[2].Priority)
	}
}

// TestCardProfileHoldsHostRAM: a replica on cards holds RAM too (the
// engine, the token embeddings llama.cpp keeps on the host, its buffers
// and its prompt cache), and its profile says how much, so that both
// fleets place and request it: more than the prompt cache alone, less
// than the weights that went to the cards.
func TestCardProfileHoldsHostRAM(t *testing.T) {
	path := filepath.Join(t.TempDir(), "llama-8b.gguf")
	if err := ggufgen.WriteFile(path, ggufgen.Llama8B()); err != nil {
		t.Fatal(err)
	}
	h, err := gguf.Read(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	// A Llama-3.1-8B Q4_K_M file's size, as the Hub lists it.
	m := Model{Header: h, WeightsBytes: 4_920_000_000}
	nodes := []Node{cardNode("L4", 2, 24)}
	c := Choice{Set: hf.FileSet{Name: "m-Q4_K_M"}, Layouts: []Option{cards("L4", 1)}}
	for _, ask := range []Ask{{CtxPool: 16384}, {CtxPool: 16384, Judge: true}} {
		sz, profiles, err := c.Serve(m, ask, nodes, Extra{})
		if err != nil {
			t.Fatal(err)
		}
		p := profiles[0]
		if p.RAMBytes <= p.PromptCacheBytes || p.RAMBytes-p.PromptCacheBytes >= m.WeightsBytes || p.RAMBytes != sz.HostBytes {
			t.Errorf("judge %v: the card profile holds %d bytes of RAM (prompt cache %d); want more than its prompt cache, "+
				"less than its weights' %d beside it, and the sizing's %d", ask.Judge, p.RAMBytes, p.PromptCacheBytes, m.WeightsBytes, sz.HostBytes)
		}
		if !ask.Judge && p.PromptCacheBytes <= 0 {
			t.Errorf("a chat model's card profile keeps no prompt cache: %+v", p)
		}
	}
}

package fleet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/ggufgen"
	"modelserve/internal/llamatest"
	"modelserve/internal/testkit"
)

// fakeNode is a node with made-up hardware whose engines never answer:
// placement without processes, for hardware this machine lacks (cards).
type fakeNode struct {
	name string
	cap  Capacity
	mu   sync.Mutex
	env  [][]string
}

func (n *fakeNode) Name() string       { return n.name }
func (n *fakeNode) Capacity() Capacity { return n.cap }
func (n *fakeNode) Start(_ context.Context, spec Spec) (Process, error) {
	n.mu.Lock()
	n.env = append(n.env, spec.Env)
	n.mu.Unlock()
	return &fakeProcess{done: make(chan struct{})}, nil
}

type fakeProcess struct {
	once sync.Once
	done chan struct{}
}

func (p *fakeProcess) PID() int              { return 0 }
func (p *fakeProcess) Endpoint() string      { return "http://127.0.0.1:1" } // nothing answers
func (p *fakeProcess) Done() <-chan struct{} { return p.done }
func (p *fakeProcess) Err() error            { return nil }
func (p *fakeProcess) RSS() int64            { return 0 }
func (p *fakeProcess) Stop(time.Duration)    { p.once.Do(func() { close(p.done) }) }

// gpuEntry is a model on cards of class, holding cardGB on each of them and
// none of a node's RAM.
func gpuEntry(t *testing.T, name, class string, cards, cardGB int) catalog.Model {
	m := entry(name, MustWriteModel(t, name+".gguf", ggufgen.Spec{}), 0)
	p := &m.Profiles[0]
	p.Name, p.GPUClass, p.GPUsPerNode, p.CardBytes, p.RAMBytes = "gpu", class, cards, int64(cardGB)<<30, 0
	return m
}

// runFakeFleet runs a fleet of nodes, whose engines never answer, over a
// catalog in SQLite, until t ends; nc changes the catalog and tells it.
func runFakeFleet(t *testing.T, nodes ...Node) (tf *testFleet, nc *NotifyingCatalog) {
	t.Helper()
	cat := MustCatalog(t)
	f, err := New(Options{Catalog: cat, Nodes: nodes, Engine: "/bin/true", Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	tf = &testFleet{Fleet: f}
	tf.start()
	t.Cleanup(func() { tf.stop(t) })
	return tf, tf.notifying(cat)
}

func TestCardsArePromisedWhole(t *testing.T) {
	node := &fakeNode{name: "gpu1", cap: Capacity{CPUCores: 16, RAMBytes: 64 << 30, AvailableBytes: 64 << 30, GPUs: []Card{
		{Index: 0, Class: "A100", MemoryBytes: 80 << 30}, {Index: 1, Class: "A100", MemoryBytes: 80 << 30},
	}}}
	tf, nc := runFakeFleet(t, node)

	MustAdd(t, nc, gpuEntry(t, "big", "A100", 2, 50))
	testkit.WaitFor(t, 5*time.Second, "big placed", func() (bool, string) { return len(tf.replicasOf("big")) == 1, jsonOf(tf.Replicas()) })
	MustAdd(t, nc, gpuEntry(t, "more", "A100", 1, 0))
	MustAdd(t, nc, gpuEntry(t, "other", "H100", 1, 0))
	var more, other ModelHealth
	testkit.WaitFor(t, 5*time.Second, "more and other unplaceable", func() (bool, string) {
		more, _ = tf.health("more")
		other, _ = tf.health("other")
		return more.Unplaceable && other.Unplaceable, jsonOf([]ModelHealth{more, other})
	})
	if want := "node gpu1: needs 1 A100 card, 0 free; replica big-1 of big uses 2"; more.Placement != want || !more.HardwareExists {
		t.Errorf("more's placement %q, want %q", more.Placement, want)
	}
	if !strings.Contains(other.Placement, "no node could ever host it") || other.HardwareExists {
		t.Errorf("other's placement %q: want no node could ever host it", other.Placement)
	}
	node.mu.Lock()
	env := node.env[0]
	node.mu.Unlock()
	if !slices.Contains(env, "CUDA_VISIBLE_DEVICES=0,1") {
		t.Errorf("big's engine environment %q lacks its cards", env)
	}
	r := tf.replicasOf("big")[0]
	if r.Threads != 8 {
		t.Errorf("threads %d, want half the 16 cores of the smallest node it fits", r.Threads)
	}
	ns := tf.Nodes()
	if len(ns) != 1 || len(ns[0].GPUs) != 2 || ns[0].GPUs[0].Replica != "big-1" || ns[0].GPUs[1].Replica != "big-1" {
		t.Errorf("nodes %s: want both cards held by big-1", jsonOf(ns))
	}
}

// TestAProfileOnTwoCardsHoldsItsNeedOnEach: a profile on K cards needs
// what it holds on each of K cards, not that divided by K, and what its
// cards hold is not taken from the node's RAM. Before a profile said
// which, a model's first profile on two cards was placed on cards half as
// large as it needed, and its card memory was promised out of RAM too.
func TestAProfileOnTwoCardsHoldsItsNeedOnEach(t *testing.T) {
	small := &fakeNode{name: "small", cap: Capacity{CPUCores: 8, RAMBytes: 16 << 30, AvailableBytes: 16 << 30, GPUs: []Card{
		{Index: 0, Class: "L4", MemoryBytes: 24 << 30}, {Index: 1, Class: "L4", MemoryBytes: 24 << 30},
	}}}
	large := &fakeNode{name: "large", cap: Capacity{CPUCores: 8, RAMBytes: 16 << 30, AvailableBytes: 16 << 30, GPUs: []Card{
		{Index: 0, Class: "L4", MemoryBytes: 48 << 30}, {Index: 1, Class: "L4", MemoryBytes: 48 << 30},
	}}}
	tf, nc := runFakeFleet(t, small, large)

	// 30 GB on each of two cards: only the large node's cards hold it.
	MustAdd(t, nc, gpuEntry(t, "wide", "L4", 2, 30))
	testkit.WaitFor(t, 5*time.Second, "wide placed", func() (bool, string) { return len(tf.replicasOf("wide")) == 1, jsonOf(tf.Replicas()) })
	if r := tf.replicasOf("wide")[0]; r.Node != "large" {
		t.Errorf("wide is on %s, whose cards have 24 GB each: it needs 30 GB on each", r.Node)
	}
	// The large node's RAM is all still free: a CPU model of 12 GB fits
	// beside wide there, and on the small node.
	MustAdd(t, nc, entry("ram", MustWriteModel(t, "ram.gguf", ggufgen.Spec{}), 12))
	MustAdd(t, nc, entry("ram2", MustWriteModel(t, "ram2.gguf", ggufgen.Spec{}), 12))
	testkit.WaitFor(t, 5*time.Second, "both CPU models placed", func() (bool, string) {
		return len(tf.replicasOf("ram")) == 1 && len(tf.replicasOf("ram2")) == 1, jsonOf(tf.Replicas())
	})
	// A third two-card model of 30 GB a card has no room: the small
	// node's cards are too small, the large one's are held; said per card.
	MustAdd(t, nc, gpuEntry(t, "third", "L4", 2, 30))
	var h ModelHealth
	testkit.WaitFor(t, 5*time.Second, "third unplaceable", func() (bool, string) {
		h, _ = tf.health("third")
		return h.Unplaceable, jsonOf(h)
	})
	if !strings.Contains(h.Placement, "node small: needs 2 L4 cards with 32.2 GB each, it has 0") ||
		!strings.Contains(h.Placement, "node large: needs 2 L4 cards, 0 free") {
		t.Errorf("third's placement %q: want each node's reason, per card", h.Placement)
	}
}

// TestAReplicaOnCardsNeedsItsHostRAM: a replica on cards holds RAM too
// (the engine, the tensors llama.cpp keeps on the host, its prompt
// cache), counted against the node's RAM room: free cards on a node
// whose RAM is promised to others do not place it, and the sentence says
// it is the RAM. A profile written before the plan said (no RAM) is taken
// to hold 1 GiB and its prompt cache.
func TestAReplicaOnCardsNeedsItsHostRAM(t *testing.T) {
	node := &fakeNode{name: "gpu1", cap: Capacity{CPUCores: 8, RAMBytes: 12<<30 + 512<<20, AvailableBytes: 12<<30 + 512<<20, GPUs: []Card{
		{Index: 0, Class: "L4", MemoryBytes: 24 << 30}, {Index: 1, Class: "L4", MemoryBytes: 24 << 30},
	}}}
	tf, nc := runFakeFleet(t, node)

	MustAdd(t, nc, entry("ram", MustWriteModel(t, "ram.gguf", ggufgen.Spec{}), 12))
	testkit.WaitFor(t, 5*time.Second, "ram placed", func() (bool, string) { return len(tf.replicasOf("ram")) == 1, jsonOf(tf.Replicas()) })
	planned := gpuEntry(t, "planned", "L4", 1, 8)
	planned.Profiles[0].RAMBytes = 1 << 30
	before := gpuEntry(t, "before", "L4", 1, 8)
	before.Profiles[0].PromptCacheBytes = 256 << 20
	for m, want := range map[*catalog.Model]string{
		&planned: "node gpu1: needs 1.1 GB, 536.9 MB free; replica ram-1 of ram uses 12.9 GB",
		&before:  "node gpu1: needs 1.3 GB, 536.9 MB free; replica ram-1 of ram uses 12.9 GB",
	} {
		MustAdd(t, nc, *m)
		var h ModelHealth
		testkit.WaitFor(t, 5*time.Second, m.Name+" unplaceable", func() (bool, string) {
			h, _ = tf.health(m.Name)
			return h.Unplaceable, jsonOf(h)
		})
		if !strings.Contains(h.Placement, want) || len(tf.replicasOf(m.Name)) != 0 {
			t.Errorf("%s's placement %q, want %q and no replica on cards whose node's RAM is promised", m.Name, h.Placement, want)
		}
	}
}

func TestNodeCPUsAreThoseWithTheMemory(t *testing.T) {
	small := &fakeNode{name: "s", cap: Capacity{CPUCores: 4, RAMBytes: 16 << 30}}
	large := &fakeNode{name: "l", cap: Capacity{CPUCores: 32, RAMBytes: 256 << 30}}
	f, err := New(Options{Catalog: MustCatalog(t), Nodes: []Node{small, large}})
	if err != nil {
		t.Fatal(err)
	}
	for memGB, want := range map[int][]int{8: {4, 32}, 100: {32}, 1000: nil} {
		if got := f.NodeCPUs(int64(memGB) << 30); !slices.Equal(got, want) {
			t.Errorf("NodeCPUs(%d) = %v, want %v", memGB, got, want)
		}
	}
}

func TestFailureReasonPicksTheEnginesWords(t *testing.T) {
	exit1 := exec.Command("sh", "-c", "exit 1").Run()
	for _, tc := range []struct {
		name  string
		lines []string
		want  string
	}{
		{"unknown architecture", []string{
			"main: loading model",
			"llama_model_load: error loading model: unknown model architecture: 'foo'",
			"llama_model_load_from_file_impl: failed to load model",
			"common_init_from_params: failed to load model 'foo.gguf'",
			"srv    operator(): operator(): cleaning up before exit...",
			"main: exiting due to model loading error",
		}, "the engine exited with status 1: error loading model: unknown model architecture: 'foo'"},
		{"bad flag", []string{"error: invalid argument: --bogus"}, "the engine exited with status 1: error: invalid argument: --bogus"},
		{"no error line", []string{"build: 0", "something odd", ""}, "the engine exited with status 1: something odd"},
		{"nothing", nil, "the engine exited with status 1 without saying why"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := failureReason(exit1, tc.lines); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestEngineArgsFromTheProfile: the engine's command line is written from
// the profile's fields, here only: the pool in its slots, what an
// embedding model and a judge need, the weights, the alias, the load
// figures the fleet reads, an HTTP thread for each connection the gateway
// and the fleet may hold open, and never a key.
func TestEngineArgsFromTheProfile(t *testing.T) {
	m := catalog.Model{Name: "m"}
	tests := []struct {
		name    string
		p       catalog.Profile
		threads int
		proj    string
		want    string
	}{
		{"the default pool in four slots, its prompt cache as sized", catalog.Profile{Size: catalog.Size{Pool: 16384, Slots: 4}, PromptCacheBytes: 512 << 20}, 2, "",
			"--ctx-size 16384 --parallel 4 --cache-ram 512 -m /w.gguf --alias m --metrics --slots --threads-http 10 --threads 2"},
		{"one long slot", catalog.Profile{Size: catalog.Size{Pool: 32768, Slots: 1}, PromptCacheBytes: 4 << 30}, 0, "",
			"--ctx-size 32768 --parallel 1 --cache-ram 4096 -m /w.gguf --alias m --metrics --slots --threads-http 4"},
		{"an unsized profile leaves the context to the engine, but not an unbounded cache", catalog.Profile{}, 0, "/p.gguf",
			"--cache-ram 0 -m /w.gguf --mmproj /p.gguf --alias m --metrics --slots --threads-http 10"},
		{"embeddings batch a whole slot at once", catalog.Profile{Size: catalog.Size{Pool: 32768, Slots: 32}, Embeddings: true}, 0, "",
			"--embedding --ctx-size 32768 --parallel 32 --batch-size 1024 --ubatch-size 1024 --cache-ram 0 -m /w.gguf --alias m --metrics --slots --threads-http 66"},
		{"a judge keeps no prompt cache", catalog.Profile{Size: catalog.Size{Pool: 8192, Slots: 1}, Judge: true}, 0, "",
			"--ctx-size 8192 --parallel 1 --cache-ram 0 -m /w.gguf --alias m --metrics --slots --threads-http 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := strings.Join(EngineArgs(m, tt.p, "/w.gguf", tt.proj, tt.threads), " "); got != tt.want {
				t.Errorf("args %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStartupTimeoutGrowsWithTheWeights(t *testing.T) {
	for _, tc := range []struct {
		p    catalog.Profile
		size int64
		want time.Duration
	}{
		{catalog.Profile{}, 0, 5 * time.Minute},
		{catalog.Profile{}, 9 << 30, 8 * time.Minute},
		{catalog.Profile{}, 400 << 30, time.Hour},
		{catalog.Profile{StartupTimeout: 90 * time.Second}, 400 << 30, 90 * time.Second},
	} {
		if got := StartupTimeout(tc.p, tc.size); got != tc.want {
			t.Errorf("StartupTimeout(%v, %d) = %s, want %s", tc.p.StartupTimeout, tc.size, got, tc.want)
		}
	}
}

func TestWeightsOfASplitModelAreItsFirstShard(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m", "rev", "Q4_K_M")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"m-00002-of-00002.gguf", "m-00001-of-00002.gguf", "mmproj-m.gguf", "README.md"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// As the catalog names them, and for an entry that names none, the
	// folder's first GGUF file but its projector.
	named := catalog.Model{Name: "m", Source: dir, Weights: []string{"Q4_K_M/m-00001-of-00002.gguf", "Q4_K_M/m-00002-of-00002.gguf"}}
	for _, m := range []catalog.Model{named, {Name: "m", Source: dir, Projector: "Q4_K_M/mmproj-m.gguf"}} {
		w, _, err := weightsFiles(catalog.Model{Name: m.Name, Source: m.Source, Weights: m.Weights})
		if err != nil || w != filepath.Join(dir, "m-00001-of-00002.gguf") {
			t.Errorf("weightsFiles(%+v) = %q, %v; want the first shard", m, w, err)
		}
	}
	_, _, err := weightsFiles(catalog.Model{Name: "m", Source: filepath.Join(dir, "nope.gguf")})
	if err == nil || !strings.Contains(err.Error(), "serve it again") {
		t.Errorf("missing weights: %v", err)
	}
}

func TestLogTailKeepsTheLastLines(t *testing.T) {
	l := newLogTail()
	for i := range logLines + 50 {
		fmt.Fprintf(l, "line %d\n", i)
	}
	fmt.Fprint(l, "unfinished")
	got := l.Lines()
	if len(got) != logLines+1 || got[0] != "line 50" || got[logLines-1] != fmt.Sprintf("line %d", logLines+49) || got[logLines] != "unfinished" {
		t.Errorf("kept %d lines: first %q, last %q", len(got), got[0], got[len(got)-1])
	}
}

func TestNewRefusesWithoutACatalog(t *testing.T) {
	if _, err := New(Options{}); err == nil || !strings.Contains(err.Error(), "Options.Catalog") {
		t.Errorf("New without a catalog: %v", err)
	}
	a := &fakeNode{name: "x"}
	if _, err := New(Options{Catalog: MustCatalog(t), Nodes: []Node{a, a}}); err == nil {
		t.Errorf("New with two nodes of one name: no error")
	}
}

// TestEveryFlagIsOneTheEngineKnows runs the installed llama-server's --help
// and fails on any flag modelserve would pass that the build does not list:
// llama-server refuses an unknown flag and exits, so a renamed flag would
// park every model.
func TestEveryFlagIsOneTheEngineKnows(t *testing.T) {
	out, err := exec.Command(llamatest.Path(t), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("llama-server --help: %v\n%s", err, out)
	}
	listed := map[string]bool{}
	for _, field := range strings.FieldsFunc(string(out), func(r rune) bool { return r == ' ' || r == ',' || r == '\n' || r == '\t' }) {
		if strings.HasPrefix(field, "-") {
			listed[field] = true
		}
	}
	if !listed["--ctx-size"] {
		t.Fatalf("--help lists no --ctx-size: not a llama-server help text?\n%s", out)
	}
	// The key reaches the engine in its environment, never its arguments.
	if !strings.Contains(string(out), "(env: "+KeyEnv+")") {
		t.Errorf("--help does not say --api-key is read from %s: the engines would start without their key", KeyEnv)
	}
	var passed []string
	for _, p := range []catalog.Profile{
		{},
		{Size: catalog.Size{Pool: 32768, Slots: 4}},
		{Size: catalog.Size{Pool: 4096, Slots: 4}, Embeddings: true},
		{Size: catalog.Size{Pool: 8192, Slots: 1}, Judge: true},
	} {
		passed = append(passed, EngineArgs(catalog.Model{Name: "m"}, p, "/w.gguf", "/p.gguf", 2)...)
	}
	passed = append(passed, "--host", "--port") // the local node's own (see process_linux.go)
	for _, a := range passed {
		if name, _, _ := strings.Cut(a, "="); strings.HasPrefix(name, "-") && !listed[name] {
			t.Errorf("modelserve passes %s, which this llama-server's --help does not list", name)
		}
	}
}

// TestCouldHost is "does this hardware exist" for a profile, as both
// fleets ask it.
func TestCouldHost(t *testing.T) {
	l4 := func(n int, gb int64) []Card {
		var cs []Card
		for i := range n {
			cs = append(cs, Card{Index: i, Class: "L4", MemoryBytes: gb << 30})
		}
		return cs
	}
	node := Capacity{CPUCores: 16, RAMBytes: 64 << 30, GPUs: l4(2, 24)}
	tests := []struct {
		name string
		p    catalog.Profile
		c    Capacity
		want bool
	}{
		{"the CPU with room", catalog.Profile{RAMBytes: 32 << 30, CPUCores: 8}, node, true},
		{"more RAM than the node has", catalog.Profile{RAMBytes: 65 << 30}, node, false},
		{"more cores than the node has", catalog.Profile{RAMBytes: 1 << 30, CPUCores: 32}, node, false},
		{"two cards of its class, each large enough", catalog.Profile{GPUClass: "L4", GPUsPerNode: 2, CardBytes: 20 << 30}, node, true},
		{"the class in another case", catalog.Profile{GPUClass: "l4", GPUsPerNode: 1, CardBytes: 20 << 30}, node, true},
		{"cards too small for what it holds on each", catalog.Profile{GPUClass: "L4", GPUsPerNode: 2, CardBytes: 30 << 30}, node, false},
		{"more cards than the node has", catalog.Profile{GPUClass: "L4", GPUsPerNode: 4, CardBytes: 1 << 30}, node, false},
		{"another class", catalog.Profile{GPUClass: "H100", GPUsPerNode: 1}, node, false},
		{"cards of unknown memory", catalog.Profile{GPUClass: "L4", GPUsPerNode: 2, CardBytes: 30 << 30},
			Capacity{CPUCores: 16, RAMBytes: 64 << 30, GPUs: l4(2, 0)}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CouldHost(tt.p, tt.c); got != tt.want {
				t.Errorf("CouldHost(%+v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
}

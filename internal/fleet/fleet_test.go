package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/ggufgen"
	"modelserve/internal/llamatest"
	"modelserve/internal/testkit"
)

// readyWithin bounds a tiny model's load on a busy two-core machine.
const readyWithin = 60 * time.Second

func TestReplicaServesChatWithItsKey(t *testing.T) {
	cat := MustCatalog(t)
	fl := MustRun(t, cat, Options{})
	MustAdd(t, fl.notifying(cat), entry("tiny", MustWriteModel(t, "tiny.gguf", ggufgen.Spec{}), 1))

	r := fl.waitReady(t, "tiny", readyWithin)
	key := fl.EngineKey(r.ID)
	if key == "" {
		t.Fatalf("replica %s has no engine key", r.ID)
	}
	status, body := chat(t, r.Endpoint, key, "tiny")
	if status != http.StatusOK {
		t.Fatalf("chat with the engine key: %d %s", status, body)
	}
	var out struct {
		Model   string `json:"model"`
		Choices []struct {
			Message struct{ Role string } `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &out); err != nil || len(out.Choices) != 1 || out.Choices[0].Message.Role != "assistant" {
		t.Fatalf("chat answer is not a completion: %s", body)
	}
	if out.Model != "tiny" {
		t.Errorf("the engine answers as %q, not its catalog name tiny (--alias)", out.Model)
	}
	if status, body := chat(t, r.Endpoint, "", "tiny"); status != http.StatusUnauthorized {
		t.Errorf("chat without the key: %d %s, want 401", status, body)
	}
	if status, _ := chat(t, r.Endpoint, "wrong", "tiny"); status != http.StatusUnauthorized {
		t.Errorf("chat with a wrong key: %d, want 401", status)
	}

	if !strings.HasPrefix(r.Endpoint, "http://127.0.0.1:") {
		t.Errorf("endpoint %s is not on loopback", r.Endpoint)
	}
	if r.PID <= 0 || r.Started.IsZero() || r.ReadyAt.Before(r.Started) {
		t.Errorf("replica lacks its process: pid %d, started %v, ready %v", r.PID, r.Started, r.ReadyAt)
	}
	// Measured the moment after it is ready (a walk of /proc, a few ms
	// that a cold start no longer waits for).
	testkit.WaitFor(t, 10*time.Second, "the ready replica's memory measured", func() (bool, string) {
		rs := fl.replicasOf("tiny")
		return len(rs) == 1 && rs[0].RSSBytes > 0, jsonOf(rs)
	})
	r = fl.replicasOf("tiny")[0]
	if r.RSSBytes <= 0 || r.EstimateBytes != 1<<30 {
		t.Errorf("replica memory: rss %d, estimate %d; want a measured rss beside the 1 GB estimate", r.RSSBytes, r.EstimateBytes)
	}
	if r.Threads != 1 || !logHas(r.Log, "--threads 1") {
		t.Errorf("threads %d, log %q: want --threads 1", r.Threads, r.Log)
	}
	if logHas(r.Log, key) {
		t.Errorf("the replica's log shows its engine key")
	}
	if !logHas(r.Log, "model loaded") {
		t.Errorf("the replica's log lacks the engine's own lines: %q", r.Log)
	}
	h, _ := fl.health("tiny")
	if h.Want != 1 || h.Ready != 1 || h.Parked || h.Unplaceable || !h.HardwareExists {
		t.Errorf("health %+v, want 1 of 1 ready", h)
	}
	nodes := fl.Nodes()
	if len(nodes) != 1 || nodes[0].PromisedBytes != 1<<30 || len(nodes[0].Replicas) != 1 || nodes[0].Replicas[0] != r.ID {
		t.Errorf("nodes %+v, want one node with %s promised 1 GB", nodes, r.ID)
	}
	if nodes[0].FreeBytes > nodes[0].RAMBytes-1<<30 {
		t.Errorf("node free %d counts the replica's promised GB as free (ram %d)", nodes[0].FreeBytes, nodes[0].RAMBytes)
	}
}

func (tf *testFleet) notifying(cat Store) *NotifyingCatalog { return NewNotifyingCatalog(cat, tf) }

func logHas(lines []string, s string) bool {
	for _, l := range lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

func TestEmbeddingModelAnswersEmbeddings(t *testing.T) {
	cat := MustCatalog(t)
	fl := MustRun(t, cat, Options{})
	mean := uint32(1)
	m := entry("embed", MustWriteModel(t, "embed.gguf", ggufgen.Spec{Pooling: &mean}), 1)
	m.Capabilities.Embeddings = true
	m.Profiles[0].Pool, m.Profiles[0].Slots, m.Profiles[0].Embeddings = 1024, 4, true
	MustAdd(t, fl.notifying(cat), m)

	r := fl.waitReady(t, "embed", readyWithin)
	status, body := post(t, r.Endpoint, "/v1/embeddings", fl.EngineKey(r.ID), map[string]any{"model": "embed", "input": "hello"})
	if status != http.StatusOK {
		t.Fatalf("embeddings: %d %s", status, body)
	}
	var out struct {
		Data []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &out); err != nil || len(out.Data) != 1 || len(out.Data[0].Embedding) == 0 {
		t.Fatalf("embeddings answer has no vector: %s", body)
	}
}

func TestVisionModelGetsItsProjector(t *testing.T) {
	// The mirror's layout: <mirror>/<model>/<revision>/<path in the repository>.
	root := filepath.Join(t.TempDir(), "vis", "abc1234")
	weights := filepath.Join(root, "Q4", "vis-Q4.gguf")
	// A name that says nothing of what it is: the catalog says.
	proj := filepath.Join(root, "vision-f16.gguf")
	for p, spec := range map[string]ggufgen.Spec{weights: {}, proj: {Projector: true}} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := ggufgen.WriteFile(p, spec); err != nil {
			t.Fatal(err)
		}
	}
	cat := MustCatalog(t)
	fl := MustRun(t, cat, Options{})
	m := entry("vis", weights, 1)
	m.Capabilities.Vision = true
	m.Origin = &catalog.Origin{Repo: "o/vis", Revision: "abc1234", Files: []catalog.OriginFile{
		{Path: "Q4/vis-Q4.gguf"}, {Path: "vision-f16.gguf"},
	}}
	m.Weights, m.Projector = []string{"Q4/vis-Q4.gguf"}, "vision-f16.gguf"
	MustAdd(t, fl.notifying(cat), m)

	r := fl.waitReady(t, "vis", readyWithin)
	if !logHas(r.Log, "--mmproj "+proj) {
		t.Errorf("the engine was not started with --mmproj %s: %q", proj, r.Log)
	}
}

func TestUnknownArchitectureIsParkedWithTheEnginesWords(t *testing.T) {
	cat := MustCatalog(t)
	fl := MustRun(t, cat, Options{})
	MustAdd(t, fl.notifying(cat), entry("foo", MustWriteModel(t, "foo.gguf", ggufgen.Spec{Architecture: "foo"}), 1))

	var h ModelHealth
	testkit.WaitFor(t, 2*readyWithin, "foo parked", func() (bool, string) {
		h, _ = fl.health("foo")
		return h.Parked, "health " + h.Reason
	})
	if h.Failures != 3 {
		t.Errorf("parked after %d failed starts, want 3", h.Failures)
	}
	if !strings.Contains(h.Reason, "unknown model architecture: 'foo'") {
		t.Errorf("reason %q does not give the engine's words", h.Reason)
	}
	if starts := len(fl.node.started()); starts != 3 {
		t.Errorf("the engine was started %d times, want 3", starts)
	}
	reps := fl.replicasOf("foo")
	if len(reps) != 1 || reps[0].State != Failed || reps[0].Failures != 3 || !logHas(reps[0].Log, "error loading model") {
		t.Errorf("replicas %+v: want one failed replica keeping the engine's log", reps)
	}
	assertGone(t, fl.node.started())

	// Parked means no more starts, look after look: a replica is placed
	// in the look that starts it.
	fl.mustSync(t)
	fl.mustSync(t)
	if starts, rs := len(fl.node.started()), fl.replicasOf("foo"); starts != 3 || len(rs) != 1 || rs[0].State != Failed {
		t.Errorf("a parked model was started again (%d starts; replicas %s)", starts, jsonOf(rs))
	}

	// Served again with weights that load: a fresh start, and whoever
	// looks right after the change no longer sees it parked.
	MustAdd(t, fl.notifying(cat), entry("foo", MustWriteModel(t, "good.gguf", ggufgen.Spec{}), 1))
	if h, _ := fl.health("foo"); h.Parked || h.Failures != 0 {
		t.Errorf("right after it was added again, foo's health is %+v", h)
	}
	r := fl.waitReady(t, "foo", readyWithin)
	if r.Failures != 0 || len(fl.replicasOf("foo")) != 1 {
		t.Errorf("the new foo replica inherited the old one's failures: %s", jsonOf(fl.replicasOf("foo")))
	}
}

func TestStartupDeadlineKillsAnEngineThatNeverLoads(t *testing.T) {
	cat := MustCatalog(t)
	fl := MustRun(t, cat, Options{MaxFailures: 1})
	// Weights that never arrive, as on a hung network filesystem: a named
	// pipe nobody writes to. llama-server listens, answers 503 while it
	// waits to read them, and never loads.
	fifo := filepath.Join(t.TempDir(), "slow.gguf")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	m := entry("slow", fifo, 1)
	m.Profiles[0].StartupTimeout = 3 * time.Second
	MustAdd(t, fl.notifying(cat), m)

	var sawLoading bool
	testkit.WaitFor(t, readyWithin, "slow parked", func() (bool, string) {
		for _, r := range fl.replicasOf("slow") {
			sawLoading = sawLoading || r.State == Loading
		}
		h, _ := fl.health("slow")
		return h.Parked, h.Reason
	})
	h, _ := fl.health("slow")
	if !strings.Contains(h.Reason, "not ready within 3s") {
		t.Errorf("reason %q does not name the deadline", h.Reason)
	}
	if !sawLoading {
		t.Errorf("the replica was never seen loading while /health answered 503")
	}
	assertGone(t, fl.node.started())
}

func TestCrashedReplicaComesBack(t *testing.T) {
	cat := MustCatalog(t)
	fl := MustRun(t, cat, Options{})
	MustAdd(t, fl.notifying(cat), entry("crashy", MustWriteModel(t, "crashy.gguf", ggufgen.Spec{}), 1))

	first := fl.waitReady(t, "crashy", readyWithin)
	key := fl.EngineKey(first.ID)
	if status, body := chat(t, first.Endpoint, key, "crashy"); status != http.StatusOK {
		t.Fatalf("first chat: %d %s", status, body)
	}
	// The engine dies as the kernel's OOM killer would end it.
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var again Replica
	testkit.WaitFor(t, readyWithin, "crashy ready again", func() (bool, string) {
		rs := fl.replicasOf("crashy")
		if len(rs) == 1 && rs[0].State == Ready && rs[0].PID != first.PID {
			again = rs[0]
			return true, ""
		}
		return false, "replicas " + jsonOf(rs)
	})
	if again.ID != first.ID || again.Failures != 1 || !strings.Contains(again.LastError, "killed by signal 9") {
		t.Errorf("after the crash: %s failures %d, last error %q; want %s with 1 failure", again.ID, again.Failures, again.LastError, first.ID)
	}
	if status, body := chat(t, again.Endpoint, fl.EngineKey(again.ID), "crashy"); status != http.StatusOK {
		t.Fatalf("chat after the restart: %d %s", status, body)
	}
	if h, _ := fl.health("crashy"); h.Parked {
		t.Errorf("one crash parked the model: %+v", h)
	}
}

// TestHungReplicaIsRestarted: an engine that stops answering without
// exiting (here: stopped with SIGSTOP, as a deadlock would leave it) is not
// left "ready"; the fleet stops it and starts another.
func TestHungReplicaIsRestarted(t *testing.T) {
	cat := MustCatalog(t)
	fl := MustRun(t, cat, Options{HealthEvery: 200 * time.Millisecond, StopGrace: 500 * time.Millisecond})
	MustAdd(t, fl.notifying(cat), entry("hangs", MustWriteModel(t, "hangs.gguf", ggufgen.Spec{}), 1))
	first := fl.waitReady(t, "hangs", readyWithin)
	if err := syscall.Kill(-first.PID, syscall.SIGSTOP); err != nil {
		t.Fatalf("stop the engine's process group: %v", err)
	}
	var again Replica
	testkit.WaitFor(t, readyWithin, "hangs ready again in a new engine", func() (bool, string) {
		rs := fl.replicasOf("hangs")
		if len(rs) == 1 && rs[0].State == Ready && rs[0].PID != first.PID {
			again = rs[0]
			return true, ""
		}
		return false, "replicas " + jsonOf(rs)
	})
	if again.Failures != 1 || !strings.Contains(again.LastError, "stopped answering /health") {
		t.Errorf("after the hang: failures %d, last error %q; want 1, saying it stopped answering", again.Failures, again.LastError)
	}
	if err := syscall.Kill(first.PID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the hung engine %d is still there: %v", first.PID, err)
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestRemovedModelStops(t *testing.T) {
	cat := MustCatalog(t)
	fl := MustRun(t, cat, Options{})
	nc := fl.notifying(cat)
	MustAdd(t, nc, entry("gone", MustWriteModel(t, "gone.gguf", ggufgen.Spec{}), 1))
	r := fl.waitReady(t, "gone", readyWithin)

	if err := nc.Remove(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "gone's replica stopped", func() (bool, string) {
		rs := fl.replicasOf("gone")
		_, known := fl.health("gone")
		return len(rs) == 0 && !known, jsonOf(rs)
	})
	assertGone(t, []int{r.PID})
	if k := fl.EngineKey(r.ID); k != "" {
		t.Errorf("a stopped replica still has an engine key")
	}
}

// smallNode is this machine pretending to have 8 GB: replicas really run,
// and placement counts against 8 GB.
func smallNode(t *testing.T) *recordingNode {
	return MustLocalNode(t, LocalConfig{Name: "small", CPUCores: 2, RAMBytes: 8 << 30, GPUs: []Card{}})
}

func TestUnplaceableSaysWhatHoldsIt(t *testing.T) {
	cat := MustCatalog(t)
	fl := MustRun(t, cat, Options{Nodes: []Node{smallNode(t)}})
	nc := fl.notifying(cat)
	path := MustWriteModel(t, "m.gguf", ggufgen.Spec{})
	MustAdd(t, nc, entry("a", path, 5))
	fl.waitReady(t, "a", readyWithin)

	MustAdd(t, nc, entry("b", path, 6))
	MustAdd(t, nc, entry("huge", path, 100))
	var b, huge ModelHealth
	testkit.WaitFor(t, 5*time.Second, "b and huge unplaceable", func() (bool, string) {
		b, _ = fl.health("b")
		huge, _ = fl.health("huge")
		return b.Unplaceable && huge.Unplaceable, jsonOf([]ModelHealth{b, huge})
	})
	if want := "node small: needs 6.4 GB, 3.2 GB free; replica a-1 of a uses 5.4 GB"; b.Placement != want || !b.HardwareExists {
		t.Errorf("b's placement %q (hardware %v), want %q and hardware", b.Placement, b.HardwareExists, want)
	}
	if !strings.Contains(huge.Placement, "no node could ever host it") ||
		!strings.Contains(huge.Placement, "node small: needs 107.4 GB, it has 8.6 GB in all") || huge.HardwareExists {
		t.Errorf("huge's placement %q (hardware %v): want it to say no node could ever host it", huge.Placement, huge.HardwareExists)
	}
	if len(fl.replicasOf("b")) != 0 || len(fl.replicasOf("huge")) != 0 {
		t.Errorf("replicas were started without room")
	}

	// Room made, b is placed without anyone asking again.
	if err := nc.Remove(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	fl.waitReady(t, "b", readyWithin)
	if h, _ := fl.health("b"); h.Unplaceable {
		t.Errorf("b is ready but still unplaceable: %+v", h)
	}
}

func TestCriticalModelEvictsOpportunistic(t *testing.T) {
	cat := MustCatalog(t)
	fl := MustRun(t, cat, Options{Nodes: []Node{smallNode(t)}})
	nc := fl.notifying(cat)
	path := MustWriteModel(t, "m.gguf", ggufgen.Spec{})
	opp := entry("spare", path, 6)
	opp.Class = catalog.ClassOpportunistic
	MustAdd(t, nc, opp)
	spare := fl.waitReady(t, "spare", readyWithin)

	crit := entry("vital", path, 6)
	crit.Class = catalog.ClassCritical
	MustAdd(t, nc, crit)
	fl.waitReady(t, "vital", readyWithin)

	assertGone(t, []int{spare.PID})
	var h ModelHealth
	testkit.WaitFor(t, 5*time.Second, "spare unplaceable", func() (bool, string) {
		h, _ = fl.health("spare")
		return h.Unplaceable, jsonOf(h)
	})
	if want := "node small: needs 6.4 GB, 2.1 GB free; replica vital-1 of vital uses 6.4 GB"; h.Placement != want {
		t.Errorf("spare's placement %q, want %q", h.Placement, want)
	}

	// A standard model takes nothing from anyone.
	std := entry("plain", path, 6)
	MustAdd(t, nc, std)
	testkit.WaitFor(t, 5*time.Second, "plain unplaceable", func() (bool, string) {
		h, _ := fl.health("plain")
		return h.Unplaceable, jsonOf(h)
	})
	if rs := fl.replicasOf("vital"); len(rs) != 1 || rs[0].State != Ready {
		t.Errorf("a standard model disturbed the critical one: %s", jsonOf(rs))
	}
}

func TestMissingEngineSaysHowToInstallIt(t *testing.T) {
	path, bin := os.Getenv("PATH"), mustSymlinkEngine(t)
	t.Setenv("PATH", t.TempDir())             // no llama-server on it
	t.Setenv("MODELSERVE_CACHE", t.TempDir()) // and none installed
	cat := MustCatalog(t)
	node := MustLocalNode(t, LocalConfig{})
	f, err := New(Options{Catalog: cat, Nodes: []Node{node}, Log: testLog(t), Threads: 1, Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	tf := &testFleet{Fleet: f, node: node}
	tf.start()
	t.Cleanup(func() { tf.stop(t) })
	MustAdd(t, tf.notifying(cat), entry("tiny", MustWriteModel(t, "tiny.gguf", ggufgen.Spec{}), 1))

	var h ModelHealth
	testkit.WaitFor(t, 5*time.Second, "tiny parked", func() (bool, string) {
		h, _ = tf.health("tiny")
		return h.Parked, jsonOf(h)
	})
	want := "llama-server is not installed on this node: install llama.cpp (its llama-server binary) " +
		"or point --llama-server (MODELSERVE_LLAMA_SERVER) at it"
	if h.Reason != want {
		t.Errorf("reason %q, want %q", h.Reason, want)
	}
	if h.Failures != 1 || len(node.started()) != 0 {
		t.Errorf("failures %d, %d starts: want it parked at once", h.Failures, len(node.started()))
	}

	// Installed later, it is found without a restart.
	t.Setenv("PATH", bin+string(os.PathListSeparator)+path)
	tf.waitReady(t, "tiny", readyWithin)
}

func TestEngineFlagPointingNowhere(t *testing.T) {
	cat := MustCatalog(t)
	fl := MustRun(t, cat, Options{Engine: "/nonexistent/llama-server"})
	MustAdd(t, fl.notifying(cat), entry("tiny", MustWriteModel(t, "tiny.gguf", ggufgen.Spec{}), 1))
	var h ModelHealth
	testkit.WaitFor(t, 5*time.Second, "tiny parked", func() (bool, string) {
		h, _ = fl.health("tiny")
		return h.Parked, jsonOf(h)
	})
	want := "there is no executable llama-server at /nonexistent/llama-server on this node: install llama.cpp there, " +
		"or point --llama-server (MODELSERVE_LLAMA_SERVER) at its llama-server binary"
	if h.Reason != want {
		t.Errorf("reason %q, want %q", h.Reason, want)
	}
}

func TestShutdownLeavesNoEngineAndRestartStartsAfresh(t *testing.T) {
	cat := MustCatalog(t)
	fl := MustRun(t, cat, Options{})
	nc := fl.notifying(cat)
	m := entry("pair", MustWriteModel(t, "pair.gguf", ggufgen.Spec{}), 1)
	m.Scaling = catalog.Scaling{Min: 2, Max: 2}
	MustAdd(t, nc, m)
	testkit.WaitFor(t, 2*readyWithin, "two replicas ready", func() (bool, string) {
		h, _ := fl.health("pair")
		return h.Ready == 2, jsonOf(h)
	})
	// One more, still loading when the fleet stops: stopped as surely.
	MustAdd(t, nc, entry("late", MustWriteModel(t, "late.gguf", ggufgen.Spec{}), 1))
	testkit.WaitFor(t, readyWithin, "late started", func() (bool, string) {
		rs := fl.replicasOf("late")
		return len(rs) == 1 && rs[0].PID > 0, jsonOf(rs)
	})

	start := time.Now()
	fl.stop(t)
	t.Logf("the fleet stopped in %s", time.Since(start).Round(time.Millisecond))
	before := fl.node.started()
	assertGone(t, before)
	if rs := fl.Replicas(); len(rs) != 0 {
		t.Errorf("replicas after the fleet stopped: %s", jsonOf(rs))
	}

	// Started again, it adopts nothing: new engines.
	fl.start()
	testkit.WaitFor(t, 2*readyWithin, "two replicas ready again", func() (bool, string) {
		h, _ := fl.health("pair")
		return h.Ready == 2, jsonOf(h)
	})
	for _, r := range fl.replicasOf("pair") {
		for _, old := range before {
			if r.PID == old {
				t.Errorf("replica %s runs the old engine %d", r.ID, old)
			}
		}
	}
}

// TestAFleetStoppedWhileAStartIsKeptStopsItsEngine: the fleet stops in
// the moment after a replica is ready and measured, while its start is
// being written to the history (here held behind another writer's
// transaction). Its engine is stopped with the rest, not left running
// with nobody to stop it.
func TestAFleetStoppedWhileAStartIsKeptStopsItsEngine(t *testing.T) {
	db := testkit.OpenDB(t)
	cat := catalog.NewStore(db)
	measured := make(chan struct{})
	log := slog.New(slog.NewTextHandler(&lineWatch{w: tWriter{t}, line: `msg="replica ready"`, seen: measured}, nil))
	fl := MustRun(t, cat, Options{History: NewHistory(db), Log: log})
	MustAdd(t, fl.notifying(cat), entry("tiny", MustWriteModel(t, "tiny.gguf", ggufgen.Spec{}), 1))
	// The history's write waits behind this transaction.
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-measured:
	case <-time.After(readyWithin):
		tx.Rollback()
		t.Fatal("the replica was not ready in time")
	}
	fl.cancel() // its context has ended when cancel returns
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	fl.stop(t)
	assertGone(t, fl.node.started())
}

// lineWatch writes on to w, and closes seen the first time a write holds
// line.
type lineWatch struct {
	w    io.Writer
	line string
	seen chan struct{}
	once sync.Once
}

func (l *lineWatch) Write(p []byte) (int, error) {
	if strings.Contains(string(p), l.line) {
		l.once.Do(func() { close(l.seen) })
	}
	return l.w.Write(p)
}

// TestAddedToAnswering measures what the fleet adds between a model put in
// the catalog and its first answer, with an engine that takes a second to
// load: the engine's own time is its to spend, the rest is the fleet's.
func TestAddedToAnswering(t *testing.T) {
	cat := MustCatalog(t)
	fl := MustRun(t, cat, Options{Engine: llamatest.SlowPath(t, time.Second)})
	m := entry("quick", MustWriteModel(t, "quick.gguf", ggufgen.Spec{}), 1)

	added := time.Now()
	MustAdd(t, fl.notifying(cat), m)
	var r Replica
	testkit.WaitFor(t, readyWithin, "quick ready", func() (bool, string) {
		rs := fl.replicasOf("quick")
		if len(rs) == 1 && rs[0].State == Ready {
			r = rs[0]
			return true, ""
		}
		return false, jsonOf(rs)
	})
	if status, body := chat(t, r.Endpoint, fl.EngineKey(r.ID), "quick"); status != http.StatusOK {
		t.Fatalf("chat: %d %s", status, body)
	}
	answered := time.Now()

	toSpawn := r.Started.Sub(added)
	engine := r.ReadyAt.Sub(r.Started)
	total := answered.Sub(added)
	t.Logf("added → engine started %s; engine start → ready seen %s (1 s of it the engine's delayed start); ready → answered %s; total %s",
		toSpawn.Round(time.Millisecond), engine.Round(time.Millisecond), answered.Sub(r.ReadyAt).Round(time.Millisecond), total.Round(time.Millisecond))
	if toSpawn > 300*time.Millisecond {
		t.Errorf("the fleet took %s to start the engine after the model was added", toSpawn)
	}
}

// TestEnginesOwnFiguresAreReadAndKept: a ready replica shows what its
// engine says of its work (/slots, /metrics), and each start is kept with
// its estimate beside the memory measured, across a new fleet on the same
// database.
func TestEnginesOwnFiguresAreReadAndKept(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "modelserve.db")
	db := testkit.OpenDBFile(t, dbPath)
	cat := catalog.NewStore(db)
	fl := MustRun(t, cat, Options{History: NewHistory(db), LoadEvery: 50 * time.Millisecond})
	path := MustWriteModel(t, "tiny.gguf", ggufgen.Spec{})
	m := entry("tiny", path, 1)
	m.Profiles[0].Pool, m.Profiles[0].Slots = 2048, 2
	MustAdd(t, fl.notifying(cat), m)
	r := fl.waitReady(t, "tiny", readyWithin)
	// Read the moment after it is ready, which is not held for it.
	testkit.WaitFor(t, 10*time.Second, "the ready replica's load read", func() (bool, string) {
		rs := fl.replicasOf("tiny")
		return len(rs) == 1 && rs[0].Load != nil, jsonOf(rs)
	})
	r = fl.replicasOf("tiny")[0]
	if r.Load == nil || r.Load.Size != catalog.SizeForSlots(2, 1024) || r.Load.SlotsBusy != 0 {
		t.Fatalf("the ready replica's load is %s, want 2 idle slots of 1024 tokens", jsonOf(r.Load))
	}
	if status, body := chat(t, r.Endpoint, fl.EngineKey(r.ID), "tiny"); status != http.StatusOK {
		t.Fatalf("chat: %d %s", status, body)
	}
	testkit.WaitFor(t, 10*time.Second, "the chat counted in the engine's figures", func() (bool, string) {
		rs := fl.replicasOf("tiny")
		if len(rs) != 1 || rs[0].Load == nil {
			return false, jsonOf(rs)
		}
		l := rs[0].Load
		return l.PromptTokens > 0 && l.PredictedTokens > 0, jsonOf(l)
	})

	// Kept once its memory is measured, a moment after ready.
	var (
		starts []Start
		err    error
	)
	testkit.WaitFor(t, 10*time.Second, "the start kept", func() (bool, string) {
		starts, err = fl.Starts(context.Background(), 10)
		return err == nil && len(starts) == 1, fmt.Sprintf("%s (%v)", jsonOf(starts), err)
	})
	s := starts[0]
	if s.Replica != r.ID || s.Model != "tiny" || s.File != path || s.Size != (catalog.Size{Pool: 2048, Slots: 2}) ||
		s.EstimateBytes != 1<<30 || s.RSSBytes <= 0 || s.RSSBytes > 1<<30 || s.ReadyAt.Before(s.Started) {
		t.Errorf("start kept as %s; want %s of tiny at %s, 2048 tokens in 2 slots, 1 GiB estimated, a measured size", jsonOf(s), r.ID, path)
	}
	t.Logf("tiny model: estimated %d bytes, measured %d", s.EstimateBytes, s.RSSBytes)

	// Kept in SQLite: another fleet opening the database file has it.
	db2 := testkit.OpenDBFile(t, dbPath)
	again, err := New(Options{Catalog: catalog.NewStore(db2), History: NewHistory(db2)})
	if err != nil {
		t.Fatal(err)
	}
	if kept, err := again.Starts(context.Background(), 10); err != nil || len(kept) != 1 || kept[0].Replica != r.ID {
		t.Errorf("after a restart the history holds %s (%v)", jsonOf(kept), err)
	}
}

// TestHeadroomIsNeverPromised: with 1 GB kept free on an 8 GB node, a
// model of 7 GB is placed, one more of 1 GB waits though 8 − 7 would
// seem to leave it room, one of 8 GB can never be placed and the fleet
// says why, and the pool the planner sizes by has 7 GB to give.
func TestHeadroomIsNeverPromised(t *testing.T) {
	cat := MustCatalog(t)
	fl := MustRun(t, cat, Options{Nodes: []Node{smallNode(t)}, Headroom: Headroom{RAM: 1 << 30}})
	nc := fl.notifying(cat)
	path := MustWriteModel(t, "m.gguf", ggufgen.Spec{})
	MustAdd(t, nc, entry("a", path, 7))
	fl.waitReady(t, "a", readyWithin)

	MustAdd(t, nc, entry("b", path, 1))
	MustAdd(t, nc, entry("whole", path, 8))
	var b, whole ModelHealth
	testkit.WaitFor(t, 5*time.Second, "b and whole unplaceable", func() (bool, string) {
		b, _ = fl.health("b")
		whole, _ = fl.health("whole")
		return b.Unplaceable && whole.Unplaceable, jsonOf([]ModelHealth{b, whole})
	})
	if want := "node small: needs 1.1 GB, 0 bytes free; replica a-1 of a uses 7.5 GB"; b.Placement != want {
		t.Errorf("b's placement %q, want %q", b.Placement, want)
	}
	if want := "node small: needs 8.6 GB, it has 7.5 GB in all once 1.1 GB is kept free for the system (--headroom)"; !strings.Contains(whole.Placement, want) || whole.HardwareExists {
		t.Errorf("whole's placement %q (hardware %v), want it to say %q", whole.Placement, whole.HardwareExists, want)
	}
	if n := fl.Nodes()[0]; n.RAMBytes != 8<<30 || n.HeadroomBytes != 1<<30 || n.FreeBytes != 0 {
		t.Errorf("the node reads %d bytes, %d kept free, %d free; want 8 GiB, 1 GiB kept, none free", n.RAMBytes, n.HeadroomBytes, n.FreeBytes)
	}
	if p := fl.Pool()[0]; p.RAMBytes != 7<<30 || p.FreeRAMBytes != 0 {
		t.Errorf("the planner's pool has %d bytes, %d free; want 7 GiB and 0", p.RAMBytes, p.FreeRAMBytes)
	}
}

// TestReadyIsToldAtOnceThenWithTheSlots: OnReady's listener hears of a
// replica as soon as it serves, and hears again once its engine has said
// how many requests it serves at once, so the gateway sends it that many
// rather than the one it assumes of an engine that has not said.
func TestReadyIsToldAtOnceThenWithTheSlots(t *testing.T) {
	cat := MustCatalog(t)
	fl := MustRun(t, cat, Options{})
	var mu sync.Mutex
	var told []string // what Serving said at each telling
	fl.OnReady(func(model string) {
		rs := fl.Serving(model)
		var s string
		switch {
		case len(rs) != 1:
			s = fmt.Sprintf("%d ready", len(rs))
		case rs[0].Load == nil:
			s = "ready, slots not known"
		default:
			s = fmt.Sprintf("ready, %d slots", rs[0].Load.Size.Slots)
		}
		mu.Lock()
		told = append(told, s)
		mu.Unlock()
	})
	m := entry("tiny", MustWriteModel(t, "tiny.gguf", ggufgen.Spec{}), 1)
	m.Profiles[0].Slots = 3
	MustAdd(t, fl.notifying(cat), m)
	fl.waitReady(t, "tiny", readyWithin)
	testkit.WaitFor(t, 10*time.Second, "told of the engine's slots", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(told, "ready, 3 slots"), fmt.Sprint(told)
	})
	mu.Lock()
	defer mu.Unlock()
	if told[0] == "0 ready" {
		t.Errorf("told %q: the first telling found no replica ready", told)
	}
}

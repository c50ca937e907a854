package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
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

// MustCatalog is a real catalog in SQLite, in a temporary file: the fleet
// reads it as modelserve does, and NotifyingCatalog tells the fleet of
// each change.
func MustCatalog(t testing.TB) *catalog.Store {
	t.Helper()
	return catalog.NewStore(testkit.OpenDB(t))
}

// MustWriteModel writes a tiny GGUF model and returns its path.
func MustWriteModel(t testing.TB, name string, spec ggufgen.Spec) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := ggufgen.WriteFile(path, spec); err != nil {
		t.Fatal(err)
	}
	return path
}

// entry is a catalog entry for the model at path, one replica, a CPU
// profile needing memGB.
func entry(name, path string, memGB int) catalog.Model {
	return catalog.Model{
		Name: name, Source: path, ContextLength: 1024,
		Profiles: []catalog.Profile{{Name: "cpu", Engine: engineLlamaCpp, Size: catalog.Size{Pool: 1024, Slots: 1}, RAMBytes: int64(memGB) << 30, Priority: 100}},
		Scaling:  catalog.Scaling{Min: 1, Max: 1},
	}
}

func MustAdd(t testing.TB, c interface {
	Add(context.Context, catalog.Model, string) error
}, m catalog.Model) {
	t.Helper()
	if err := c.Add(context.Background(), m, "test"); err != nil {
		t.Fatal(err)
	}
}

// recordingNode is a node that remembers every engine it started, so a
// test can check that none outlives the fleet.
type recordingNode struct {
	Node
	mu    sync.Mutex
	pids  []int
	procs []Process
}

func (n *recordingNode) Start(ctx context.Context, spec Spec) (Process, error) {
	p, err := n.Node.Start(ctx, spec)
	if err == nil {
		n.mu.Lock()
		n.pids = append(n.pids, p.PID())
		n.procs = append(n.procs, p)
		n.mu.Unlock()
	}
	return p, err
}

func (n *recordingNode) started() []int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]int(nil), n.pids...)
}

// MustLocalNode is this machine as a recording node; cfg may pretend it has
// less memory.
func MustLocalNode(t testing.TB, cfg LocalConfig) *recordingNode {
	t.Helper()
	n, err := Local(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rn := &recordingNode{Node: n}
	// Whatever a test leaves behind, no engine outlives it. Stop signals
	// an engine's group only while the engine is unreaped, so it never
	// reaches a process another started under a reused id.
	t.Cleanup(func() {
		rn.mu.Lock()
		procs := rn.procs
		rn.mu.Unlock()
		for _, p := range procs {
			p.Stop(0)
		}
	})
	return rn
}

// testLog writes the fleet's log to the test's, shown when it fails.
func testLog(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// testFleet is a fleet running in the background, with the engine under
// test and one thread per engine.
type testFleet struct {
	*Fleet
	node   *recordingNode
	cancel context.CancelFunc
	done   chan error
}

// MustRun starts a fleet over cat. opts' Catalog, Engine, Nodes, Log,
// Threads, Backoff and Residency (off) are filled in where left empty.
func MustRun(t testing.TB, cat Catalog, opts Options) *testFleet {
	t.Helper()
	if opts.Catalog == nil {
		opts.Catalog = cat
	}
	if opts.Engine == "" {
		opts.Engine = llamatest.Path(t)
	}
	var node *recordingNode
	if len(opts.Nodes) == 0 {
		node = MustLocalNode(t, LocalConfig{})
		opts.Nodes = []Node{node}
	} else if rn, ok := opts.Nodes[0].(*recordingNode); ok {
		node = rn
	}
	if opts.Log == nil {
		opts.Log = testLog(t)
	}
	if opts.Threads == 0 {
		opts.Threads = 1
	}
	if opts.Backoff == 0 {
		opts.Backoff = 20 * time.Millisecond
	}
	if opts.Residency == 0 {
		// Off: these tests swap at once on purpose, to test swapping and
		// the other rules; a residency would have each swap wait seconds.
		// The residency's own tests (TestResidency) step a clock.
		opts.Residency = -1
	}
	f, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	tf := &testFleet{Fleet: f, node: node, done: make(chan error, 1)}
	tf.start()
	t.Cleanup(func() {
		tf.stop(t)
		if t.Failed() {
			for _, r := range f.Replicas() {
				t.Logf("replica %s (%s): %s\n%s", r.ID, r.State, r.Detail, strings.Join(r.Log, "\n"))
			}
		}
	})
	return tf
}

func (tf *testFleet) start() {
	ctx, cancel := context.WithCancel(context.Background())
	tf.cancel = cancel
	done := make(chan error, 1)
	tf.done = done
	go func() { done <- tf.Run(ctx) }()
}

// stop cancels Run and waits for it, failing the test should it take
// longer than the engines' grace. A fleet stopped already (by the test,
// before its cleanup) is found so.
func (tf *testFleet) stop(t testing.TB) {
	t.Helper()
	tf.cancel()
	select {
	case err := <-tf.done:
		if err != nil {
			t.Errorf("Run returned %v", err)
		}
		tf.done <- nil
	case <-time.After(20 * time.Second):
		t.Errorf("Run did not return within 20s of its context ending")
	}
}

// mustSync waits until the fleet has looked at the catalog and what runs
// (Sync): what it was to do by now, it has done or begun.
func (tf *testFleet) mustSync(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := tf.Sync(ctx); err != nil {
		t.Fatalf("the fleet did not look within 20s: %v", err)
	}
}

// waitReady waits for a ready replica of model and returns it.
func (tf *testFleet) waitReady(t testing.TB, model string, timeout time.Duration) Replica {
	t.Helper()
	var got Replica
	testkit.WaitFor(t, timeout, model+" ready", func() (bool, string) {
		var states []string
		for _, r := range tf.Replicas() {
			if r.Model == model && r.State == Ready {
				got = r
				return true, ""
			}
			if r.Model == model {
				states = append(states, fmt.Sprintf("%s %s %s", r.ID, r.State, r.Detail))
			}
		}
		h, _ := tf.health(model)
		return false, fmt.Sprintf("replicas %v; health %+v", states, h)
	})
	return got
}

func (tf *testFleet) health(model string) (ModelHealth, bool) {
	for _, h := range tf.ModelHealth() {
		if h.Model == model {
			return h, true
		}
	}
	return ModelHealth{}, false
}

func (tf *testFleet) replicasOf(model string) []Replica {
	var out []Replica
	for _, r := range tf.Replicas() {
		if r.Model == model {
			out = append(out, r)
		}
	}
	return out
}

// post sends body to the replica's route with key (none when empty) and
// returns the status and the answer.
func post(t testing.TB, endpoint, route, key string, body any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, endpoint+route, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("POST %s%s: %v", endpoint, route, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// chat asks the replica for a few tokens.
func chat(t testing.TB, endpoint, key, model string) (int, []byte) {
	t.Helper()
	return post(t, endpoint, "/v1/chat/completions", key, map[string]any{
		"model": model, "max_tokens": 4,
		"messages": []map[string]string{{"role": "user", "content": "Say hello."}},
	})
}

// assertGone fails unless every process and process group started is gone.
// A process killed a moment ago may still be a zombie waiting for init to
// reap it (kill 0 finds zombies too), so they get a bounded moment (3 s)
// to vanish; anything still there after it is a process left running.
func assertGone(t testing.TB, pids []int) {
	t.Helper()
	if len(pids) == 0 {
		t.Fatal("no engine was started")
	}
	testkit.WaitFor(t, 3*time.Second, "every engine started and its process group gone", func() (bool, string) {
		var left []string
		for _, pid := range pids {
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				left = append(left, fmt.Sprintf("engine %d is still there (kill 0: %v)", pid, err))
			} else if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
				left = append(left, fmt.Sprintf("a process of engine %d's group is still there (kill 0: %v)", pid, err))
			}
		}
		return len(left) == 0, strings.Join(left, "; ")
	})
}

// mustSymlinkEngine puts the test engine on a fresh folder as
// llama-server, for a PATH to find it.
func mustSymlinkEngine(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(llamatest.Path(t), filepath.Join(dir, "llama-server")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Package fleetsuite_test is one behaviour suite that the fleet must
// pass on both its backends: the local one (internal/fleet) running
// engines as processes on two nodes, and the Kubernetes one
// (internal/kubefleet) on a real control plane with two nodes, every pod
// it writes run for real by kubetest's Kubelet. The two were once two
// controllers written apart, which had drifted where each test of one
// said nothing of the other; now they are one controller over two
// backends, and each case is written once, over what the fleet offers,
// and asserts what a client notices through a real request to a
// replica's endpoint, with its key.
package fleetsuite_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/catalogtest"
	"modelserve/internal/fleet"
	"modelserve/internal/ggufgen"
	"modelserve/internal/testkit"
	"modelserve/internal/testlog"
)

// Fleet is what both fleets offer and the suite drives: what the gateway,
// the jobs and the console use of a fleet.
type Fleet interface {
	Use(model string, replicas int, askedAt time.Time) (release func())
	Hold(id string, askedAt time.Time) (release func(), ok bool)
	Serving(model string) []fleet.Replica
	Replicas() []fleet.Replica
	ModelHealth() []fleet.ModelHealth
	Stop(id string) error
	Restart(id string) error
	EngineKey(id string) string
	OnStopping(fn func(endpoint string))
	Nodes() []fleet.NodeStatus
	Poke()
}

// backend is one fleet running over a catalog the suite changes.
type backend struct {
	name    string
	fleet   Fleet
	catalog *catalogtest.Catalog
	// source is the model's weights where the fleet's catalog says they
	// are: under the mirror folder the Kubernetes fleet's pods fetch from.
	source string
	size   int64
	sum    string
	// keyPerReplica is what the fleet promises of its engines' keys:
	// one per replica (the local fleet, which starts each engine with
	// its own), or one per Deployment (the Kubernetes fleet: the pods of
	// one model's profile share their Deployment's Secret, while each
	// profile and each model has its own).
	keyPerReplica bool
	// restart stops the fleet and starts another in its place over the
	// same state, as a restart of modelserve does.
	restart func(*testing.T) Fleet
}

// backends are the fleets the suite runs against, each started for a
// test by its own function.
var backends = []struct {
	name          string
	start         func(t *testing.T, w weights) (f Fleet, restart func(*testing.T) Fleet)
	keyPerReplica bool
}{
	{"local", startLocal, true},
	{"kubernetes", startKubernetes, false},
}

// TestFleets runs every case against each fleet. The cases of one fleet
// share it, each with models of its own, one after the other: the
// machine runs every engine of both.
func TestFleets(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			w := writeWeights(t)
			cat := &catalogtest.Catalog{}
			w.catalog = cat
			b := &backend{name: be.name, catalog: cat, source: w.source, size: w.size, sum: w.sum, keyPerReplica: be.keyPerReplica}
			b.fleet, b.restart = be.start(t, w)
			if n := len(b.fleet.Nodes()); n < 2 {
				t.Fatalf("the %s fleet has %d nodes, want the suite's two", be.name, n)
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, b) })
			}
		})
	}
}

// weights is the tiny model the suite serves, in a mirror folder:
// <dir>/org--tiny/abc1234/tiny.gguf.
type weights struct {
	dir, source string
	size        int64
	sum         string
	catalog     *catalogtest.Catalog
}

func writeWeights(t *testing.T) weights {
	t.Helper()
	dir := t.TempDir()
	source := filepath.Join(dir, "org--tiny", "abc1234", "tiny.gguf")
	if err := os.MkdirAll(filepath.Dir(source), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := ggufgen.WriteFile(source, ggufgen.Spec{}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(source)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return weights{dir: dir, source: source, size: int64(len(b)), sum: hex.EncodeToString(sum[:])}
}

// model is a catalog entry of the tiny model: one CPU profile of a GiB
// and a core, two slots of 8192 tokens (room for a long answer), min
// replicas always, up to max.
func (b *backend) model(name string, min, max int) catalog.Model {
	return catalog.Model{
		Name: name, Source: b.source, Weights: []string{"tiny.gguf"}, ContextLength: 512,
		Profiles: []catalog.Profile{{Name: "cpu", Engine: "llamacpp", Size: catalog.Size{Pool: 16384, Slots: 2}, RAMBytes: 1 << 30, CPUCores: 1, Priority: 100}},
		Scaling:  catalog.Scaling{Min: min, Max: max}, AddedAt: time.Now(),
		Origin: &catalog.Origin{Repo: "org/tiny", Revision: "abc1234", Files: []catalog.OriginFile{
			{Path: "tiny.gguf", Bytes: b.size, SHA256: b.sum}}},
	}
}

// serve adds m to the catalog, and removes it when the case ends.
func (b *backend) serve(t *testing.T, m catalog.Model) {
	t.Helper()
	b.catalog.Put(m)
	b.fleet.Poke()
	t.Cleanup(func() {
		b.catalog.Remove(m.Name)
		b.fleet.Poke()
		testkit.WaitFor(t, 2*time.Minute, m.Name+"'s replicas to be gone", func() (bool, string) {
			rs := b.replicas(m.Name)
			return len(rs) == 0, fmt.Sprint(rs)
		})
	})
}

// replicas are model's replicas, of every state.
func (b *backend) replicas(model string) []fleet.Replica {
	var out []fleet.Replica
	for _, r := range b.fleet.Replicas() {
		if r.Model == model {
			out = append(out, r)
		}
	}
	return out
}

// ready waits for n replicas of model to be served, and returns them.
func (b *backend) ready(t *testing.T, model string, n int) []fleet.Replica {
	t.Helper()
	var rs []fleet.Replica
	testkit.WaitFor(t, 3*time.Minute, fmt.Sprintf("%d served replicas of %s", n, model), func() (bool, string) {
		rs = b.fleet.Serving(model)
		return len(rs) == n, fmt.Sprint(b.replicas(model))
	})
	return rs
}

// answer is what a client was answered: the replica it was sent to, the
// status and the body.

type answer struct {
	replica string
	status  int
	body    string
	err     error
}

func (a answer) ok() bool { return a.err == nil && a.status == http.StatusOK }

func (a answer) String() string {
	if a.err != nil {
		return fmt.Sprintf("%s: %v", a.replica, a.err)
	}
	return fmt.Sprintf("%s: %d %s", a.replica, a.status, clip(a.body))
}

// ask is a client's request to model as the gateway sends it: asked of the
// fleet (Use), sent to a replica it serves once held (Hold), at the
// replica's endpoint with its key. tokens is how long an answer it asks.
func (b *backend) ask(t *testing.T, model string, tokens int) answer {
	t.Helper()
	asked := time.Now()
	release := b.fleet.Use(model, 1, asked)
	defer release()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		for _, r := range b.fleet.Serving(model) {
			done, ok := b.fleet.Hold(r.ID, asked)
			if !ok {
				continue
			}
			a := b.send(r, b.fleet.EngineKey(r.ID), tokens)
			done()
			return a
		}
		time.Sleep(50 * time.Millisecond)
	}
	return answer{err: fmt.Errorf("no replica of %s was served within 3 minutes", model)}
}

// send asks replica r for a chat answer of tokens tokens with key.
func (b *backend) send(r fleet.Replica, key string, tokens int) answer {
	body := fmt.Sprintf(`{"model": %q, "messages": [{"role": "user", "content": "hello"}], "max_tokens": %d, "ignore_eos": true}`, r.Model, tokens)
	return request(r, "POST", "/v1/chat/completions", key, body)
}

func request(r fleet.Replica, method, path, key, body string) answer {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, r.Endpoint+path, strings.NewReader(body))
	if err != nil {
		return answer{replica: r.ID, err: err}
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{replica: r.ID, err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return answer{replica: r.ID, status: resp.StatusCode, body: string(b), err: err}
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// fleetLog is a fleet's log, shown when t fails: kept in a buffer, since
// the fleet may log after t's last line.
func fleetLog(t *testing.T) *slog.Logger {
	var buf testlog.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the fleet's log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// run runs a fleet's Run until t ends, or stop is called.
func run(t *testing.T, name string, runFleet func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runFleet(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("the %s fleet's Run: %v", name, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

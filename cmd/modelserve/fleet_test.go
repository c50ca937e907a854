package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/auth"
	"modelserve/internal/fleet"
	"modelserve/internal/gateway"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
	"modelserve/internal/llamatest"
	"modelserve/internal/mirror"
	"modelserve/internal/plan"
	"modelserve/internal/testkit"
	"modelserve/jobs"
)

// TestServeJobReachesAnAnsweringReplica runs a serve job through the fleet
// as main wires them: the job adds the model through the notifying catalog,
// the fleet starts the engine, and the job's smoke test gets its answer
// with the engine's key.
func TestServeJobReachesAnAnsweringReplica(t *testing.T) {
	w := newServeWorld(t, fleet.LocalConfig{})
	j := w.serve(t, jobs.Request{Repo: w.repo, Replicas: 1, CtxPool: 1024, ContextLength: 1024})
	placement, _ := j.Step(jobs.StepPlacement)
	smoke, _ := j.Step(jobs.StepSmoke)
	if placement.State != jobs.Done || !strings.Contains(placement.Detail, "ready on") ||
		smoke.State != jobs.Done || j.Reply == "" {
		t.Errorf("placement %+v, smoke test %+v, reply %q: want a replica ready and an answer", placement, smoke, j.Reply)
	}
	rs := w.fleet.Replicas()
	if len(rs) != 1 || rs[0].State != fleet.Ready || rs[0].Model != j.Model {
		t.Errorf("the fleet's replicas %+v: want one ready replica of %s", rs, j.Model)
	}
}

// TestDefaultsPlaceOnANodeWithLittleFreeMemory: served with the defaults on
// a node with less free memory than the default pool needs, the pool is
// cut to fit it (planned and placed on the same figures), and the job ends
// with a replica that started and answered, not one that never places.
func TestDefaultsPlaceOnANodeWithLittleFreeMemory(t *testing.T) {
	const ram = 180 << 20 // the tiny model needs about 200 MB with a 16384-token pool
	w := newServeWorld(t, fleet.LocalConfig{Name: "small", CPUCores: 2, RAMBytes: ram, GPUs: []fleet.Card{}})
	j := w.serve(t, jobs.Request{Repo: w.repo, Replicas: 1})
	if smoke, _ := j.Step(jobs.StepSmoke); smoke.State != jobs.Done || j.Reply == "" {
		t.Fatalf("smoke test %+v: want an answer from a placed replica", smoke)
	}
	check, _ := j.Step(jobs.StepCheck)
	if !strings.Contains(check.Detail, "cut to fit") {
		t.Errorf("the check step says %q; want the default pool cut to fit", check.Detail)
	}
	m, err := w.catalog.Get(context.Background(), j.Model)
	if err != nil {
		t.Fatal(err)
	}
	p := m.Profiles[0]
	if p.RAMBytes <= 0 || p.RAMBytes > ram {
		t.Errorf("the catalog reserves %d bytes on a node of %d", p.RAMBytes, ram)
	}
	rs := w.fleet.Replicas()
	if len(rs) != 1 || rs[0].State != fleet.Ready || rs[0].EstimateBytes != p.RAMBytes {
		t.Errorf("replicas %+v: want one ready, placed by the catalog's %d bytes", rs, p.RAMBytes)
	}
	t.Logf("tiny model on a 180 MB node: %s; reserves %d bytes, measured %d", check.Detail, p.RAMBytes, rs[0].RSSBytes)
}

// serveWorld is a Hub with a tiny model, a real fleet on a local node as
// cfg describes it, a planner over the fleet's pool and the jobs, wired as
// serve() wires them.
type serveWorld struct {
	repo    string
	fleet   *fleet.Fleet
	catalog *catalog.Store
	jobs    *jobs.Server
}

func newServeWorld(t *testing.T, cfg fleet.LocalConfig) *serveWorld {
	engine := llamatest.Path(t)
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	hub := hubtest.New(t)
	const repo = "acme/Tiny-GGUF"
	hub.AddRepo(repo, hubtest.RepoOptions{})
	hub.AddFile(repo, "tiny-Q4_K_M.gguf", ggufgen.Bytes(ggufgen.Spec{}))
	client, err := hf.NewClient(hf.Options{Endpoint: hub.URL(), MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	mir, err := mirror.New(mirror.Options{Dir: t.TempDir(), Registry: client, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	db := testkit.OpenDBFile(t, filepath.Join(t.TempDir(), "modelserve.db"))
	cat := catalog.NewStore(db)

	node, err := fleet.Local(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// As newFleet builds it, with the test engine on one thread.
	f, err := fleet.New(fleet.Options{Catalog: cat, Engine: engine, Nodes: []fleet.Node{node}, Threads: 1, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	nc := fleet.NewNotifyingCatalog(cat, f)
	fctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(fctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("the fleet did not stop within 20s")
		}
	})
	planner, err := plan.New(plan.Config{Pool: f.Pool, Headers: plan.ReadHeaders(client), DownloadURL: client.DownloadURL, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Options{Catalog: cat, Fleet: f, Tokens: auth.NewTokens(db), Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	srv, err := jobs.New(jobs.Deps{DB: db, Registry: client, Mirror: mir, Catalog: nc, Fleet: f,
		Planner: planner, Pool: f.Pool, Gateway: gw,
		EngineBuild: 6000, Log: quiet, Poll: 20 * time.Millisecond, ReadyTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return &serveWorld{repo: repo, fleet: f, catalog: cat, jobs: srv}
}

// serve runs a job to its end and fails the test unless it is done.
func (w *serveWorld) serve(t *testing.T, req jobs.Request) jobs.Job {
	t.Helper()
	ctx := context.Background()
	j, err := w.jobs.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for !j.Ended() {
		if time.Now().After(deadline) {
			t.Fatalf("the job did not end within 90s: %+v", j.Steps)
		}
		time.Sleep(50 * time.Millisecond)
		if j, err = w.jobs.Get(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
	}
	if j.State != jobs.Done {
		t.Fatalf("the job ended %s: %s; steps %+v", j.State, j.Error, j.Steps)
	}
	return j
}

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
	"modelserve/internal/fleet"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
	"modelserve/internal/llamatest"
	"modelserve/internal/mirror"
	"modelserve/internal/store"
	"modelserve/jobs"
)

// TestServeJobReachesAnAnsweringReplica runs a serve job through the fleet
// as main wires them: the job adds the model through the notifying catalog,
// the fleet starts the engine, and the job's smoke test gets its answer
// with the engine's key.
func TestServeJobReachesAnAnsweringReplica(t *testing.T) {
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
	mir, err := mirror.New(mirror.Options{Dir: t.TempDir(), HTTP: client.HTTPClient(), Authorize: client.AuthorizeRequest, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "modelserve.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cat := catalog.NewStore(db)

	// As newFleet builds it, with the test engine on one thread.
	f, err := fleet.New(fleet.Options{Catalog: cat, Engine: engine, Threads: 1, Log: quiet})
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

	srv, err := jobs.New(jobs.Deps{DB: db, Registry: client, Mirror: mir, Catalog: nc, Fleet: jobsFleet{f},
		EngineBuild: 6000, Log: quiet, Poll: 20 * time.Millisecond, ReadyTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	j, err := srv.Start(ctx, jobs.Request{Repo: repo, Replicas: 1, CtxPool: 1024, ContextLength: 1024})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for !j.Ended() {
		if time.Now().After(deadline) {
			t.Fatalf("the job did not end within 90s: %+v", j.Steps)
		}
		time.Sleep(50 * time.Millisecond)
		if j, err = srv.Get(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
	}
	if j.State != jobs.Done {
		t.Fatalf("the job ended %s: %s; steps %+v", j.State, j.Error, j.Steps)
	}
	placement, _ := j.Step(jobs.StepPlacement)
	smoke, _ := j.Step(jobs.StepSmoke)
	if placement.State != jobs.Done || !strings.Contains(placement.Detail, "ready on") ||
		smoke.State != jobs.Done || j.Reply == "" {
		t.Errorf("placement %+v, smoke test %+v, reply %q: want a replica ready and an answer", placement, smoke, j.Reply)
	}
	rs := f.Replicas()
	if len(rs) != 1 || rs[0].State != fleet.Ready || rs[0].Model != j.Model {
		t.Errorf("the fleet's replicas %+v: want one ready replica of %s", rs, j.Model)
	}
}

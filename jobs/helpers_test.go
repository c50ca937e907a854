package jobs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
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
	"modelserve/internal/mirror"
	"modelserve/internal/plan"
	"modelserve/internal/testkit"
)

// testEnv is a job server wired to real parts: a Hub on loopback, the Hub
// client, a mirror in a temporary directory, SQLite in another.
type testEnv struct {
	t         testing.TB
	hub       *hubtest.Server
	db        *sql.DB
	catalog   *catalog.Store
	mirrorDir string
	client    *hf.Client
	mirror    *mirror.Mirror
	srv       *Server
	deps      Deps
}

// envOption changes the dependencies before the server is built.
type envOption func(*testEnv)

func withToken(token string) envOption {
	return func(e *testEnv) { e.client = MustClient(e.t, e.hub, token) }
}

// withFleet gives the jobs f, and the real gateway over it for the smoke
// test.
func withFleet(f *fakeFleet) envOption {
	return func(e *testEnv) {
		e.deps.Fleet = f
		gw, err := gateway.New(gateway.Options{Catalog: e.catalog, Fleet: gatewayFleet{f}, Tokens: noTokens{}, Log: quietLog()})
		if err != nil {
			e.t.Fatal(err)
		}
		e.deps.Gateway = gw
	}
}

// gatewayFleet is the fake fleet as the gateway sees fleets.
type gatewayFleet struct{ f *fakeFleet }

func (g gatewayFleet) Serving(model string) []fleet.Replica {
	var out []fleet.Replica
	for _, r := range g.f.Replicas() {
		if r.Model == model && r.State == fleet.Ready {
			out = append(out, r)
		}
	}
	return out
}

func (g gatewayFleet) EngineKey(id string) string { return g.f.EngineKey(id) }

func (g gatewayFleet) ModelHealth() []fleet.ModelHealth { return g.f.ModelHealth() }

func (g gatewayFleet) Use(string, int, time.Time) func() { return func() {} }

// Hold takes every request: the fake fleet retires no replica under one.
func (g gatewayFleet) Hold(string, time.Time) (func(), bool) { return func() {}, true }

// noTokens knows no token: the smoke test asks as modelserve itself.
type noTokens struct{}

func (noTokens) Check(context.Context, string) (auth.Token, error) {
	return auth.Token{}, auth.ErrBadToken
}

func withEngineBuild(n int) envOption { return func(e *testEnv) { e.deps.EngineBuild = n } }

// withNodeMemory gives the jobs a pool of one idle CPU node with b bytes
// of RAM, all of it free.
func withNodeMemory(b int64) envOption {
	return func(e *testEnv) {
		e.deps.Pool = func() []plan.Node { return []plan.Node{{Name: "node", CPUCores: 8, RAMBytes: b, FreeRAMBytes: b}} }
	}
}

// quietLog keeps the tests' output to their own failures.
func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func MustClient(t testing.TB, hub *hubtest.Server, token string) *hf.Client {
	t.Helper()
	c, err := hf.NewClient(hf.Options{Endpoint: hub.URL(), Token: token, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func MustMirror(t testing.TB, dir string, client *hf.Client) *mirror.Mirror {
	t.Helper()
	m, err := mirror.New(mirror.Options{Dir: dir, Registry: client,
		Backoff: 10 * time.Millisecond, ProgressEvery: 20 * time.Millisecond, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// newEnv starts a Hub and a job server on it.
func newEnv(t testing.TB, opts ...envOption) *testEnv {
	t.Helper()
	e := &testEnv{t: t, hub: hubtest.New(t), mirrorDir: t.TempDir()}
	e.db = testkit.OpenDB(t)
	e.catalog = catalog.NewStore(e.db)
	e.client = MustClient(t, e.hub, "")
	e.deps = Deps{DB: e.db, Catalog: e.catalog, EngineBuild: 6000, Log: quietLog(),
		Poll: 10 * time.Millisecond, UnplacedGrace: 50 * time.Millisecond, ReadyTimeout: 5 * time.Second}
	for _, o := range opts {
		o(e)
	}
	e.mirror = MustMirror(t, e.mirrorDir, e.client)
	e.deps.Registry, e.deps.Mirror = e.client, e.mirror
	e.srv = MustServer(t, e.deps)
	return e
}

func MustServer(t testing.TB, d Deps) *Server {
	t.Helper()
	s, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// addModel puts a repository holding GGUF files made from specs on the Hub,
// and returns the commit main then points at.
func (e *testEnv) addModel(repo string, opts hubtest.RepoOptions, files map[string]ggufgen.Spec) string {
	e.t.Helper()
	e.hub.AddRepo(repo, opts)
	commit := ""
	for path, spec := range files {
		commit = e.hub.AddFile(repo, path, ggufgen.Bytes(spec))
	}
	return commit
}

func MustStart(t testing.TB, s *Server, req Request) Job {
	t.Helper()
	j, err := timedStart(s, req)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// timedStart starts a job for req; its error says how long the start
// took to fail (a wait for the database's write lock shows there).
func timedStart(s *Server, req Request) (Job, error) {
	t0 := time.Now()
	j, err := s.Start(context.Background(), req)
	if err != nil {
		return Job{}, fmt.Errorf("Start(%+v) failed after %v: %w", req, time.Since(t0), err)
	}
	return j, nil
}

// MustEnd waits for the job to end and returns it as it ended.
func MustEnd(t testing.TB, s *Server, id string) Job {
	t.Helper()
	ch, stop := s.Subscribe(id)
	// A closure, so that a subscription made again below is the one
	// stopped.
	defer func() { stop() }()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				// Dropped or closed: where it stands now decides.
				j, err := s.Get(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				if j.Ended() {
					return j
				}
				ch, stop = s.Subscribe(id)
				continue
			}
			if ev.Job.Ended() {
				return ev.Job
			}
		case <-timeout:
			j, _ := s.Get(context.Background(), id)
			t.Fatalf("job %s did not end within 20s; it stands at %+v", id, j)
		}
	}
}

// MustStep is the job's step of that name.
func MustStep(t testing.TB, j Job, name string) Step {
	t.Helper()
	st, ok := j.Step(name)
	if !ok {
		t.Fatalf("job %s has no step %q; its steps: %+v", j.ID, name, j.Steps)
	}
	return st
}

// catalogNames lists the catalog's models by name.
func (e *testEnv) catalogNames() []string {
	e.t.Helper()
	list, err := e.catalog.List(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	var names []string
	for _, m := range list {
		names = append(names, m.Name)
	}
	return names
}

// partials are the mirror's half-fetched files.
func partials(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasSuffix(p, ".partial") {
			out = append(out, p)
		}
		return nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}

package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"modelserve/catalog"
	"modelserve/internal/auth"
	"modelserve/internal/fleet"
	"modelserve/internal/ggufgen"
	"modelserve/internal/llamatest"
	"modelserve/internal/testkit"
	"modelserve/internal/testlog"
)

// readyWithin bounds a tiny model's load on a busy two-core machine.
const readyWithin = 60 * time.Second

// env is the gateway as modelserve runs it: a real catalog and tokens in
// SQLite, a real fleet running llama.cpp's llama-server, the gateway's
// routes on a mux as handlers/routes.go mounts them, and an HTTP server.
type env struct {
	t      testing.TB
	cat    *fleet.NotifyingCatalog
	tokens *auth.Tokens
	fleet  *fleet.Fleet
	gw     *Gateway
	reg    *prometheus.Registry
	url    string
	token  string // may do everything
	logs   *testlog.Buffer
}

// mustEnv starts it all; opts' Catalog, Fleet, Tokens, Metrics and Log are
// filled in. wrap, when given, is the fleet as the gateway sees it.
func mustEnv(t testing.TB, opts Options, wrap ...func(*fleet.Fleet) Fleet) *env {
	t.Helper()
	return mustEnvOn(t, nil, opts, wrap...)
}

// mustEnvOn is mustEnv with a fleet of nodes (none: this machine).
func mustEnvOn(t testing.TB, nodes []fleet.Node, opts Options, wrap ...func(*fleet.Fleet) Fleet) *env {
	t.Helper()
	db := testkit.OpenDB(t)
	e := &env{t: t, tokens: auth.NewTokens(db), reg: prometheus.NewRegistry(), logs: &testlog.Buffer{}}
	log := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	store := catalog.NewStore(db)
	fl, err := fleet.New(fleet.Options{
		Catalog: store, Nodes: nodes, Engine: llamatest.Path(t), Threads: 1, Log: log.With("part", "fleet"),
		Interval: 50 * time.Millisecond, Backoff: 20 * time.Millisecond, LoadEvery: 100 * time.Millisecond,
		StopGrace: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.fleet, e.cat = fl, fleet.NewNotifyingCatalog(store, fl)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fl.Run(ctx) }()

	opts.Catalog, opts.Fleet, opts.Tokens, opts.Metrics, opts.Log = e.cat, fl, e.tokens, e.reg, log.With("part", "gateway")
	for _, w := range wrap {
		opts.Fleet = w(fl)
	}
	if e.gw, err = New(opts); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", e.gw.ListModels)
	mux.HandleFunc("GET /v1/models/{model}", e.gw.ShowModel)
	mux.HandleFunc("POST /v1/", e.gw.Forward)
	mux.HandleFunc("/v1/", e.gw.NotFound)
	srv := httptest.NewServer(mux)
	e.url = srv.URL
	e.token = e.mustToken("all", auth.Limits{})

	t.Cleanup(func() {
		srv.Close()
		e.gw.Close()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the fleet's Run returned %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("the fleet did not stop within 20s")
		}
		if t.Failed() {
			t.Logf("log:\n%s", e.logs.String())
		}
	})
	return e
}

func (e *env) mustToken(name string, lim auth.Limits) string {
	e.t.Helper()
	tok, err := e.tokens.CreateLimited(context.Background(), name, lim)
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// tinyArgs keep the tiny model's context small, as its profile does: it
// loads faster. For an engine a test starts by hand.
var tinyArgs = []string{"--ctx-size", "1024", "--parallel", "1"}

// chatModel is a catalog entry for a tiny chat model with one replica.
func chatModel(t testing.TB, name string, spec ggufgen.Spec) catalog.Model {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".gguf")
	if err := ggufgen.WriteFile(path, spec); err != nil {
		t.Fatal(err)
	}
	return catalog.Model{
		Name: name, Source: path, ContextLength: 1024,
		Profiles: []catalog.Profile{{Name: "cpu", Engine: "llamacpp", Size: catalog.Size{Pool: 1024, Slots: 1}, RAMBytes: 1 << 30, Priority: 100}},
		Scaling:  catalog.Scaling{Min: 1, Max: 1},
	}
}

// embedModel is a tiny embedding model (96 wide) with one replica.
func embedModel(t testing.TB, name string) catalog.Model {
	m := chatModel(t, name, ggufgen.Spec{Pooling: new(uint32(1)), EmbeddingLength: 96, HeadCount: 6, HeadCountKV: 3})
	m.Capabilities.Embeddings = true
	m.Profiles[0].Pool, m.Profiles[0].Slots, m.Profiles[0].Embeddings = 1024, 4, true
	return m
}

func (e *env) mustAdd(m catalog.Model) {
	e.t.Helper()
	if err := e.cat.Add(context.Background(), m, "test"); err != nil {
		e.t.Fatal(err)
	}
}

// waitServing waits until model has n ready replicas.
func (e *env) waitServing(model string, n int) []fleet.Replica {
	e.t.Helper()
	var rs []fleet.Replica
	testkit.WaitFor(e.t, readyWithin, fmt.Sprintf("%d replicas of %s ready", n, model), func() (bool, string) {
		rs = e.fleet.Serving(model)
		return len(rs) == n, fmt.Sprintf("%d ready; replicas %+v", len(rs), e.fleet.Replicas())
	})
	return rs
}

// client is the official OpenAI Go client against the gateway, with tok as
// its api key and no retries (a refusal is what some tests look for).
func (e *env) client(tok string) *openai.Client {
	c := openai.NewClient(option.WithBaseURL(e.url+"/v1/"), option.WithAPIKey(tok), option.WithMaxRetries(0),
		option.WithRequestTimeout(60*time.Second))
	return &c
}

// post sends body to path with tok and returns the answer.
func (e *env) post(ctx context.Context, path, tok string, body any) (*http.Response, []byte) {
	e.t.Helper()
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	default:
		b, _ = json.Marshal(body)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+path, bytes.NewReader(b))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, out
}

// apiErr is the OpenAI error in an answer.
func apiErr(t testing.TB, body []byte) apiError {
	t.Helper()
	var v struct{ Error *apiError }
	if err := json.Unmarshal(body, &v); err != nil || v.Error == nil {
		t.Fatalf("not an OpenAI error: %s", body)
	}
	return *v.Error
}

// counter is a gateway counter's value for labels.
func (e *env) counter(c *prometheus.CounterVec, labels ...string) float64 {
	return testutil.ToFloat64(c.WithLabelValues(labels...))
}

// waitCounter waits for a gateway counter to reach want: a request is
// counted a moment after its client has the whole answer. t is the test
// (or subtest) it fails.
func (e *env) waitCounter(t testing.TB, c *prometheus.CounterVec, want float64, labels ...string) {
	t.Helper()
	testkit.WaitFor(t, 2*time.Second, fmt.Sprintf("counter %v at %v", labels, want), func() (bool, string) {
		n := e.counter(c, labels...)
		return n == want, fmt.Sprint(n)
	})
}

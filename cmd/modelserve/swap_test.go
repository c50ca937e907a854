package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/llamatest"
	"modelserve/internal/testkit"
	"modelserve/jobs"
)

// TestLocalMemoryIsTheNodesMemory: with --local-memory the local node has
// that much memory in the pool, and a serve with the defaults is sized to
// it: the check step cuts the default pool to fit, and the replica starts
// and answers.
func TestLocalMemoryIsTheNodesMemory(t *testing.T) {
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Tiny-Llama-GGUF", "Tiny-Llama-Q4_K_M.gguf", ggufgen.Spec{ContextLength: 32768})
	const budget = 180 << 20 // the tiny model needs about 200 MB with the default 16384-token pool
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: t.TempDir(), HFEndpoint: hub.URL(), LlamaServer: llamatest.Path(t),
		LocalMemory: budget})
	var nodes struct {
		Nodes []struct {
			RAMBytes int64 `json:"ram_bytes"`
		} `json:"nodes"`
	}
	if code := s.do("GET", "/api/v1/nodes", nil, &nodes); code != http.StatusOK || len(nodes.Nodes) != 1 || nodes.Nodes[0].RAMBytes != budget {
		t.Fatalf("the nodes: %d %+v; want one with %d bytes", code, nodes, budget)
	}
	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Tiny-Llama-GGUF", "replicas": 1}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d %+v", code, job)
	}
	seen := s.watch(job.ID, 2*time.Minute)
	last := seen[len(seen)-1]
	if last.State != jobs.Done || last.Reply == "" {
		t.Fatalf("serving ended %s: %s; steps %+v", last.State, last.Error, last.Steps)
	}
	if check, _ := last.Step(jobs.StepCheck); !strings.Contains(check.Detail, "cut to fit") {
		t.Errorf("the check step says %q; want the default pool cut to fit the budget", check.Detail)
	}
}

// TestLocalMemoryTooSmallIsASentence: a --local-memory no model can run in
// stops the start with a sentence naming the figures, not a crash or a
// fleet that never places anything.
func TestLocalMemoryTooSmallIsASentence(t *testing.T) {
	cfg, err := parseServe([]string{"--local-memory", "100MB", "--data", t.TempDir(), "--addr", "127.0.0.1:0"},
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	err = serve(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(string) {})
	if err == nil || !strings.Contains(err.Error(), "cannot hold any model: llama-server alone takes") {
		t.Errorf("serve with 100MB: %v; want a sentence that it cannot hold any model", err)
	}
	for _, bad := range []string{"lots", "-1GB", "NaN", "5PB", "12XB"} {
		if _, err := parseServe([]string{"--local-memory", bad}, func(string) string { return "" }, io.Discard); err == nil ||
			!strings.Contains(err.Error(), "--local-memory is the memory") {
			t.Errorf("--local-memory %q: %v; want it refused in a sentence", bad, err)
		}
	}
	cfg, err = parseServe(nil, func(k string) string {
		if k == "MODELSERVE_LOCAL_MEMORY" {
			return "12GiB"
		}
		return ""
	}, io.Discard)
	if err != nil || cfg.LocalMemory != 12<<30 {
		t.Errorf("MODELSERVE_LOCAL_MEMORY=12GiB reads as %d, %v", cfg.LocalMemory, err)
	}
}

// swapBudget is a --local-memory that holds one tiny model at a 2048-token
// pool (the check step sizes it at about 170 MB) and never two: llama-server
// alone takes 150 MiB of each.
const swapBudget = 300e6

// startSwapWorld is modelserve with swapBudget of memory and the tiny
// models names served on demand, each idle for an hour (only a swap stops
// one within a test), an OpenAI client of its gateway, and its data folder.
func startSwapWorld(t testing.TB, names ...string) (*apiServer, openai.Client, string) {
	t.Helper()
	return startSwapWorldOn(t, hubtest.New(t), swapBudget, names...)
}

// startSwapWorldOn is startSwapWorld on the registry hub, which a test
// adds more repositories to, with budget of memory.
func startSwapWorldOn(t testing.TB, hub *hubtest.Server, budget int64, names ...string) (*apiServer, openai.Client, string) {
	t.Helper()
	pools := make([]int, len(names))
	for i := range pools {
		pools[i] = 2048
	}
	return startSwapWorldSized(t, hub, budget, names, pools)
}

// startSwapWorldSized is startSwapWorldOn with each model's token pool
// (ctx_pool) as given: the larger, the more memory its replica takes.
// Its residency is off (config's zero): these are tests of swapping
// itself, each swap asked for at once; tune, when given, sets more of
// its config (a residency, for the tests of that).
func startSwapWorldSized(t testing.TB, hub *hubtest.Server, budget int64, names []string, pools []int, tune ...func(*config)) (*apiServer, openai.Client, string) {
	t.Helper()
	data := t.TempDir()
	cfg := config{Addr: "127.0.0.1:0", Data: data, HFEndpoint: hub.URL(), LlamaServer: llamatest.Path(t), LocalMemory: budget}
	for _, f := range tune {
		f(&cfg)
	}
	s := startAPI(t, cfg)
	for i, name := range names {
		repo := "acme/" + name + "-GGUF"
		tinyRepo(t, hub, repo, name+"-Q4_K_M.gguf", ggufgen.Spec{ContextLength: 4096})
		var job jobs.Job
		if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": repo, "name": name, "replicas": 0, "idle_after": "1h",
			"context_length": min(pools[i], 2048), "ctx_pool": pools[i]}, &job); code != http.StatusAccepted {
			t.Fatalf("serve %s: %d %+v", name, code, job)
		}
		if seen := s.watch(job.ID, 2*time.Minute); seen[len(seen)-1].State != jobs.Done {
			last := seen[len(seen)-1]
			t.Fatalf("serving %s ended %s: %s; steps %+v", name, last.State, last.Error, last.Steps)
		}
	}
	// Connections kept for as many clients as the tests run at once: with
	// Go's default of two, six of eight clients dialled again for every
	// request, and a request sent first could reach modelserve after one
	// sent milliseconds later, which the order the benchmark checks
	// cannot tell from modelserve's own.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 16
	return s, clientThrough(s, tr), data
}

// clientThrough is an OpenAI client of s's gateway, sending through tr.
func clientThrough(s *apiServer, tr *http.Transport) openai.Client {
	return openai.NewClient(option.WithBaseURL(s.base+"/v1/"), option.WithAPIKey(s.token), option.WithMaxRetries(0),
		option.WithRequestTimeout(2*time.Minute), option.WithHTTPClient(&http.Client{Transport: tr}))
}

// ownClient is a client of s's gateway with one connection of its own:
// what it sends goes on that connection, in the order sent, never on one
// another client holds or one dialled meanwhile. Clients sharing a pool
// took each other's idle connections, and a request sent first but
// dialled anew reached modelserve after one sent after it.
func ownClient(s *apiServer) openai.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxConnsPerHost = 1
	return clientThrough(s, tr)
}

func askModel(c openai.Client, model, text string) error {
	_, err := askSeen(c, model, text)
	return err
}

// asked is what a client can tell of one request it sent: when it was
// written to its connection, from which address (the remote that
// modelserve's access log names), and the answer's Server-Timing, by
// metric (wait, engine).
type asked struct {
	written time.Time
	local   string
	timing  map[string]time.Duration
}

// askSeen is askModel, saying also what the client saw of it (asked).
func askSeen(c openai.Client, model, text string) (asked, error) {
	var a asked
	var raw *http.Response
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn:      func(info httptrace.GotConnInfo) { a.local = info.Conn.LocalAddr().String() },
		WroteRequest: func(httptrace.WroteRequestInfo) { a.written = time.Now() },
	})
	_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(4),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}}, option.WithResponseInto(&raw))
	if err != nil {
		return a, err
	}
	a.timing = serverTimings(raw.Header)
	return a, nil
}

// serverTimings are the durations an answer's Server-Timing headers give,
// by metric name ("wait;dur=1.25;desc=..." is wait: 1.25 ms).
func serverTimings(h http.Header) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, v := range h.Values("Server-Timing") {
		for metric := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(metric), ";")
			for p := range strings.SplitSeq(params, ";") {
				if ms, ok := strings.CutPrefix(strings.TrimSpace(p), "dur="); ok {
					if f, err := strconv.ParseFloat(ms, 64); err == nil {
						out[name] = time.Duration(f * float64(time.Millisecond))
					}
				}
			}
		}
	}
	return out
}

// fleetView is GET /api/v1/replicas as these tests read it.
type fleetView struct {
	Replicas []struct {
		ID, Model, State, Detail string
		Started                  time.Time `json:"started"`
		ReadyAt                  time.Time `json:"ready_at"`
	} `json:"replicas"`
	Models []struct {
		Model     string `json:"model"`
		LastStop  string `json:"last_stop"`
		Placement string `json:"placement"`
	} `json:"models"`
	Starts []struct {
		Model string `json:"model"`
	} `json:"starts"`
}

func (s *apiServer) fleet() fleetView {
	s.t.Helper()
	var v fleetView
	if code := s.do("GET", "/api/v1/replicas", nil, &v); code != http.StatusOK {
		s.t.Fatalf("GET /api/v1/replicas: %d", code)
	}
	return v
}

func (v fleetView) running(model string) int {
	n := 0
	for _, r := range v.Replicas {
		if r.Model == model && r.State != "stopping" && r.State != "draining" {
			n++
		}
	}
	return n
}

func (v fleetView) starts(model string) int {
	n := 0
	for _, st := range v.Starts {
		if st.Model == model {
			n++
		}
	}
	return n
}

// startsOnceKept is how many starts of model the history keeps, once it
// keeps at least atLeast or 5 s have passed, read again a moment later: a
// start is kept a moment after its replica is ready (after the requests
// that waited for it reach the engine), so a count read as the last answer
// ends may miss it, and the second read sees a start kept beside it.
func (s *apiServer) startsOnceKept(model string, atLeast int) int {
	deadline := time.Now().Add(5 * time.Second)
	for s.fleet().starts(model) < atLeast && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	return s.fleet().starts(model)
}

// TestSwapBetweenTwoModelsThatDoNotFitTogether: two tiny models on demand
// in memory for one. Each request for the one not loaded gives back the
// other's idle replica and is answered; the API says why the replica
// stopped and /metrics counts it, and the time each waited for memory.
func TestSwapBetweenTwoModelsThatDoNotFitTogether(t *testing.T) {
	s, c, _ := startSwapWorld(t, "alpha", "beta")
	for i, model := range []string{"alpha", "beta", "alpha"} {
		if err := askModel(c, model, fmt.Sprintf("swap %d", i)); err != nil {
			t.Fatalf("request %d for %s: %v", i, model, err)
		}
		if v := s.fleet(); v.running(model) != 1 || v.running(map[string]string{"alpha": "beta", "beta": "alpha"}[model]) != 0 {
			t.Fatalf("after asking %s: %+v; want it alone loaded", model, v.Replicas)
		}
	}
	var stop string
	for _, m := range s.fleet().Models {
		if m.Model == "beta" {
			stop = m.LastStop
		}
	}
	if !strings.Contains(stop, "given back for alpha, idle for") {
		t.Errorf("beta's last stop %q; want it given back for alpha, idle", stop)
	}
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `modelserve_fleet_evictions_total{model="beta",reason="swap"} 1`) ||
		!strings.Contains(string(b), `modelserve_fleet_evictions_total{model="alpha",reason="swap"}`) {
		t.Errorf("/metrics lacks the evictions of alpha and beta:\n%s", grepLines(string(b), "evictions"))
	}
	// beta waited for alpha's room, then alpha for beta's.
	if !strings.Contains(string(b), "modelserve_fleet_memory_wait_seconds_count 2\n") ||
		!strings.Contains(string(b), `modelserve_fleet_memory_wait_seconds_bucket{le="+Inf"} 2`) {
		t.Errorf("/metrics does not count the two waits for memory:\n%s", grepLines(string(b), "memory_wait"))
	}
}

func grepLines(text, word string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestConcurrentFirstRequestsSwapInOneEngine: eight requests at once for a
// model whose room another's idle replica holds start one engine between
// them, and all are answered.
func TestConcurrentFirstRequestsSwapInOneEngine(t *testing.T) {
	s, c, _ := startSwapWorld(t, "alpha", "beta")
	if err := askModel(c, "alpha", "load alpha"); err != nil {
		t.Fatal(err)
	}
	before := s.fleet().starts("beta")
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = askModel(c, "beta", fmt.Sprintf("client %d", i))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
	if n := s.startsOnceKept("beta", before+1) - before; n != 1 {
		t.Errorf("eight first requests started %d engines of beta; want one", n)
	}
}

// TestSwapToAnEngineThatFailsAnswers503: when the model swapped in cannot
// start (its weights broken on disk), the request waiting for it is
// answered 503 with the fleet's reason, not left hanging, and the next
// request for the model given back swaps it in again and is answered.
func TestSwapToAnEngineThatFailsAnswers503(t *testing.T) {
	_, c, data := startSwapWorld(t, "alpha", "beta")
	if err := askModel(c, "alpha", "load alpha"); err != nil {
		t.Fatal(err)
	}
	breakWeights(t, data, "beta-Q4_K_M.gguf")

	err := askModel(c, "beta", "start a broken engine")
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("the request for beta, whose engine cannot start: %v; want a 503", err)
	}
	if apiErr.StatusCode != http.StatusServiceUnavailable || !strings.Contains(apiErr.Message, "beta is parked") {
		t.Fatalf("the request for beta, whose engine cannot start: %v (%s); want 503 saying it is parked and why", err, apiErr.RawJSON())
	}
	if err := askModel(c, "alpha", "alpha again"); err != nil {
		t.Errorf("alpha, given back for beta, asked again: %v; want it swapped in and answered", err)
	}
}

// breakWeights overwrites the mirror's files named name in the data folder
// with bytes no engine loads, keeping their size.
func breakWeights(t *testing.T, data, name string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != name {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n++
		return os.WriteFile(path, bytes.Repeat([]byte{0x5a}, int(info.Size())), 0o644)
	})
	if err != nil || n == 0 {
		t.Fatalf("breaking %s in %s: %v (%d files)", name, data, err, n)
	}
}

// TestStreamingReplicaIsNotStoppedForAnotherModel: while alpha streams a
// long answer, a request for beta (which needs alpha's room) waits; alpha's
// answer runs to its end, whole, and beta is answered after it.
func TestStreamingReplicaIsNotStoppedForAnotherModel(t *testing.T) {
	_, c, _ := startSwapWorld(t, "alpha", "beta")
	if err := askModel(c, "alpha", "load alpha"); err != nil {
		t.Fatal(err)
	}
	st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "alpha", MaxTokens: openai.Int(1024), // its longest answer (max_output)
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("a long answer")}}, option.WithJSONSet("ignore_eos", true))
	defer st.Close()
	if !st.Next() {
		t.Fatalf("alpha's stream gave no first chunk: %v", st.Err())
	}
	betaDone := make(chan time.Time, 1)
	var betaErr error
	go func() {
		betaErr = askModel(c, "beta", "while alpha streams")
		betaDone <- time.Now()
	}()
	chunks := 1
	for st.Next() {
		chunks++
		if chunks%100 == 0 {
			time.Sleep(50 * time.Millisecond) // a slow reader: the answer outlasts beta's arrival
		}
	}
	streamEnd := time.Now()
	// 1024 tokens, some of them joined in one chunk where a character
	// spans two.
	if err := st.Err(); err != nil || chunks < 500 {
		t.Errorf("alpha's stream ended after %d chunks with %v; want the whole answer", chunks, err)
	}
	select {
	case at := <-betaDone:
		if betaErr != nil {
			t.Errorf("beta, asked while alpha streamed: %v", betaErr)
		} else if at.Before(streamEnd.Add(-time.Second)) {
			t.Errorf("beta was answered %s before alpha's answer ended: alpha's room was taken mid-answer", streamEnd.Sub(at))
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("beta was not answered within 2 minutes of alpha's answer ending")
	}
}

// TestThreeModelsInMemoryForOneAnswerEveryRequest: three models on demand
// in memory for one, asked in random order by four clients at once, so
// requests keep arriving for models whose replicas are being given back or
// are still loading: every request is answered, none meets a refused
// connection, a 502 or a 503.
func TestThreeModelsInMemoryForOneAnswerEveryRequest(t *testing.T) {
	s, c, _ := startSwapWorld(t, "alpha", "beta", "gamma")
	models := []string{"alpha", "beta", "gamma"}
	const (
		clients = 4
		each    = 12 // bounded: 48 requests
	)
	deadline := time.Now().Add(2 * time.Minute)
	var (
		mu     sync.Mutex
		failed []string
		sent   int
		wg     sync.WaitGroup
	)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range each {
				if time.Now().After(deadline) {
					return
				}
				model := models[rand.N(len(models))]
				err := askModel(c, model, fmt.Sprintf("client %d request %d", i, n))
				mu.Lock()
				sent++
				if err != nil {
					var apiErr *openai.Error
					if errors.As(err, &apiErr) {
						err = fmt.Errorf("%d %s", apiErr.StatusCode, apiErr.RawJSON())
					}
					failed = append(failed, model+": "+err.Error())
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	swaps := 0
	for _, model := range models {
		swaps += s.startsOnceKept(model, 2)
	}
	t.Logf("%d requests, %d failed, %d engine starts", sent, len(failed), swaps)
	if len(failed) > 0 {
		t.Errorf("%d of %d requests failed; the first: %s", len(failed), sent, failed[0])
	}
	if sent < clients*each {
		t.Errorf("only %d of %d requests were sent within the bound", sent, clients*each)
	}
	if swaps < 4 {
		t.Errorf("%d engine starts: the requests did not make the models swap", swaps)
	}
}

// TestServeJobTakesTheRoomOfIdleReplicas: with the memory held by an idle
// replica of a model on demand, a serve of another model is sized to the
// room that replica would give back, not to what is left beside it (its
// default pool is not cut), placed once the replica is given back, and
// its smoke test answered.
func TestServeJobTakesTheRoomOfIdleReplicas(t *testing.T) {
	hub := hubtest.New(t)
	// alpha at a 2048-token pool is promised about 174 MB; beta's default
	// pool needs about 199 MB, and its smallest a little less: beside
	// alpha, 197.5 MB is left, room for beta only with its pool cut.
	const budget = 174.2e6 + 197.5e6
	s, c, _ := startSwapWorldOn(t, hub, budget, "alpha")
	if err := askModel(c, "alpha", "load alpha"); err != nil {
		t.Fatal(err)
	}
	// The request's end reaches the fleet a moment after its answer.
	var nodes struct {
		Nodes []struct {
			FreeBytes        int64 `json:"free_bytes"`
			ReclaimableBytes int64 `json:"reclaimable_bytes"`
		} `json:"fleet"`
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code := s.do("GET", "/api/v1/nodes", nil, &nodes)
		if code == http.StatusOK && len(nodes.Nodes) == 1 && nodes.Nodes[0].ReclaimableBytes > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node with alpha idle: %d %+v; want alpha's room reclaimable; replicas %+v", code, nodes, s.fleet())
		}
	}
	tinyRepo(t, hub, "acme/beta-GGUF", "beta-Q4_K_M.gguf", ggufgen.Spec{ContextLength: 4096})
	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/beta-GGUF", "name": "beta", "replicas": 1}, &job); code != http.StatusAccepted {
		t.Fatalf("serve beta: %d %+v", code, job)
	}
	seen := s.watch(job.ID, 2*time.Minute)
	last := seen[len(seen)-1]
	if last.State != jobs.Done || last.Reply == "" {
		t.Fatalf("serving beta beside idle alpha ended %s: %s; steps %+v", last.State, last.Error, last.Steps)
	}
	if check, _ := last.Step(jobs.StepCheck); strings.Contains(check.Detail, "cut to") || !strings.Contains(check.Detail, "16384 tokens") {
		t.Errorf("the check step says %q; want beta's default pool, sized to the room alpha gives back", check.Detail)
	}
	v := s.fleet()
	if v.running("beta") != 1 || v.running("alpha") != 0 {
		t.Errorf("after serving beta: %+v; want beta alone loaded", v.Replicas)
	}
	for _, m := range v.Models {
		if m.Model == "alpha" && !strings.Contains(m.LastStop, "given back for beta") {
			t.Errorf("alpha's last stop %q; want it given back for beta", m.LastStop)
		}
	}
}

// TestRemovedWhileWaitingAnswers404: a request waiting for room for beta
// (alpha, answering a long stream, holds it) when beta is removed from the
// catalog is answered 404 at once, not left to wait out its time or
// answered 503.
func TestRemovedWhileWaitingAnswers404(t *testing.T) {
	s, c, _ := startSwapWorld(t, "alpha", "beta")
	if err := askModel(c, "alpha", "load alpha"); err != nil {
		t.Fatal(err)
	}
	st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "alpha", MaxTokens: openai.Int(1024), // its longest answer (max_output)
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("a long answer")}}, option.WithJSONSet("ignore_eos", true))
	defer st.Close()
	if !st.Next() {
		t.Fatalf("alpha's stream gave no first chunk: %v", st.Err())
	}
	betaErr := make(chan error, 1)
	go func() { betaErr <- askModel(c, "beta", "while alpha streams") }()
	// beta waits for alpha's room.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var h struct {
			Models []struct {
				Model     string `json:"model"`
				Placement string `json:"placement"`
			} `json:"models"`
		}
		s.do("GET", "/api/v1/replicas", nil, &h)
		waits := false
		for _, m := range h.Models {
			waits = waits || m.Model == "beta" && strings.Contains(m.Placement, "waiting for alpha-1")
		}
		if waits {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("beta did not come to wait for alpha's room: %+v", h)
		}
	}
	removed := time.Now()
	if code := s.do("DELETE", "/api/v1/catalog/beta", nil, nil); code != http.StatusOK && code != http.StatusNoContent {
		t.Fatalf("removing beta: %d", code)
	}
	select {
	case err := <-betaErr:
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || !strings.Contains(apiErr.Message, "was removed from the catalog") {
			t.Errorf("the request waiting for beta, removed: %v; want 404 saying it was removed", err)
		}
		if took := time.Since(removed); took > 5*time.Second {
			t.Errorf("the waiter for beta was answered %s after its removal", took)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the request waiting for beta, removed, was not answered within 30 s")
	}
	for st.Next() {
	}
	if err := st.Err(); err != nil {
		t.Errorf("alpha's stream: %v", err)
	}
}

// TestAModelAskedInALoopDoesNotStarveAWaitingOne: alpha is asked for again
// and again by three clients, in memory for one model, while a request for
// beta comes: beta is answered within the answers queued ahead of it plus
// one swap (with a swap's slack for a busy machine), and alpha's requests
// asked before beta's keep their place: each ends before beta's does,
// rather than waiting for beta's swap and the swap back.
func TestAModelAskedInALoopDoesNotStarveAWaitingOne(t *testing.T) {
	s, c, data := startSwapWorld(t, "alpha", "beta")
	var swap time.Duration
	for i, model := range []string{"alpha", "beta", "alpha"} {
		began := time.Now()
		if err := askModel(c, model, fmt.Sprintf("swap %d alone", i)); err != nil {
			t.Fatalf("the swap to %s alone: %v", model, err)
		}
		if i > 0 {
			swap = max(swap, time.Since(began))
		}
	}
	type sent struct{ at, end time.Time }
	var (
		mu     sync.Mutex
		alphas []sent
		wg     sync.WaitGroup
		stop   = make(chan struct{})
		failed []error
	)
	// Each client on a connection of its own, beta's opened before it
	// asks (the models' list): which request reached modelserve first is
	// which was sent first.
	bc := ownClient(s)
	if _, err := bc.Models.List(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := ownClient(s)
			for n := 0; n < 200; n++ { // bounded
				select {
				case <-stop:
					return
				default:
				}
				r := sent{at: time.Now()}
				err := askModel(c, "alpha", fmt.Sprintf("client %d request %d", i, n))
				r.end = time.Now()
				mu.Lock()
				alphas = append(alphas, r)
				if err != nil {
					failed = append(failed, err)
				}
				mu.Unlock()
			}
		}()
	}
	// Alpha answering its three clients, who ask again at once: its
	// requests are in flight when beta's comes.
	answered := func(after time.Time) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, a := range alphas {
			if a.at.After(after) {
				n++
			}
		}
		return n, fmt.Sprint(n, " of alpha's ", len(alphas), " answers")
	}
	testkit.WaitFor(t, 30*time.Second, "alpha answering its three clients", func() (bool, string) {
		n, saw := answered(time.Time{})
		return n >= 3, saw
	})
	beta := sent{at: time.Now()}
	err := askModel(bc, "beta", "the waiting one")
	beta.end = time.Now()
	// Alpha asked for after beta's answer too.
	testkit.WaitFor(t, 30*time.Second, "alpha answering a request asked after beta's answer", func() (bool, string) {
		n, saw := answered(beta.end)
		return n >= 1, saw
	})
	close(stop)
	wg.Wait()
	if err != nil || len(failed) > 0 {
		t.Fatalf("beta: %v; %d of alpha's %d requests failed: %v", err, len(failed), len(alphas), failed)
	}
	// Sent within sentAtOnce before beta's is sent at once: which of two
	// such reached modelserve first, the clients cannot tell. A client's
	// own work between its clock and the wire (the request's JSON, its
	// write) took over a millisecond under the race detector, four
	// clients on two cores: modelserve's log once had an alpha request
	// stamped more than 1 ms before beta's arrive with it, within a
	// millisecond, and it was counted as overtaken.
	const sentAtOnce = 5 * time.Millisecond
	ahead, late := beta.at, 0
	for _, a := range alphas {
		if a.at.Before(beta.at.Add(-sentAtOnce)) && a.end.After(beta.at) {
			ahead = later(ahead, a.end)
			if a.end.After(beta.end) {
				late++
			}
		}
	}
	// The swap beta waited for, from the giving back of alpha's room to
	// beta's replica ready, as the fleet recorded it: the engine's load
	// under this load took 144 ms once against 79 ms alone, and that is
	// not a starved wait.
	var waited time.Duration
	for _, sp := range s.settledSwaps(t, data) {
		if sp.model == "beta" && sp.ready.After(beta.at) && !sp.ready.After(beta.end) {
			waited = sp.ready.Sub(sp.from)
		}
	}
	if waited == 0 {
		t.Fatalf("the fleet's log tells of no swap to beta while it waited:\n%s", strings.Join(s.fleetLines(beta.at, beta.end), "\n"))
	}
	t.Logf("beta waited %s; the answers ahead of it ended %s after it was asked; its swap %s; one swap alone %s; %d alpha requests",
		beta.end.Sub(beta.at).Round(time.Millisecond), ahead.Sub(beta.at).Round(time.Millisecond), waited.Round(time.Millisecond),
		swap.Round(time.Millisecond), len(alphas))
	// A swap alone is the slack: modelserve's pass and beta's short answer.
	if over := beta.end.Sub(ahead.Add(waited + swap)); over > 0 {
		t.Errorf("beta was answered %s past the answers ahead of it plus its swap (and a swap's slack): a model asked for again and again starved it", over.Round(time.Millisecond))
	}
	if late > 0 {
		t.Errorf("%d of alpha's requests asked before beta's were answered after it: they lost their place when alpha's replica was given back", late)
	}
}

// TestSwapOrderHoldsAcrossSizes: three tiny models
// of different sizes in memory for two of the smaller: alpha streams a
// long answer; beta, the largest, asked meanwhile, waits for alpha's room;
// gamma, the smallest, asked after beta, would fit beside alpha now, but
// that room is beta's once alpha falls idle. Gamma is answered after beta,
// in the order they were asked.
func TestSwapOrderHoldsAcrossSizes(t *testing.T) {
	// alpha ~174 MB (a 2048-token pool), beta ~248 MB (32768), gamma
	// ~171 MB (512): alpha and gamma fit together in 390 MB, beta with
	// neither.
	_, c, _ := startSwapWorldSized(t, hubtest.New(t), 390e6, []string{"alpha", "beta", "gamma"}, []int{2048, 32768, 512})
	if err := askModel(c, "alpha", "load alpha"); err != nil {
		t.Fatal(err)
	}
	st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "alpha", MaxTokens: openai.Int(1024),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("a long answer")}}, option.WithJSONSet("ignore_eos", true))
	defer st.Close()
	if !st.Next() {
		t.Fatalf("alpha's stream gave no first chunk: %v", st.Err())
	}
	type answered struct {
		at  time.Time
		err error
	}
	ask := func(model string, after time.Duration) chan answered {
		done := make(chan answered, 1)
		go func() {
			time.Sleep(after)
			err := askModel(c, model, "while alpha streams")
			done <- answered{time.Now(), err}
		}()
		return done
	}
	betaDone := ask("beta", 0)
	gammaDone := ask("gamma", 200*time.Millisecond)
	chunks := 1
	for st.Next() {
		chunks++
		if chunks%100 == 0 {
			time.Sleep(100 * time.Millisecond) // a slow reader: the answer outlasts both asks
		}
	}
	if err := st.Err(); err != nil || chunks < 500 {
		t.Fatalf("alpha's stream ended after %d chunks with %v; want the whole answer", chunks, err)
	}
	wait := func(model string, done chan answered) answered {
		select {
		case a := <-done:
			if a.err != nil {
				t.Fatalf("%s: %v", model, a.err)
			}
			return a
		case <-time.After(2 * time.Minute):
			t.Fatalf("%s was not answered within 2 minutes of alpha's answer ending", model)
			return answered{}
		}
	}
	beta, gamma := wait("beta", betaDone), wait("gamma", gammaDone)
	if gamma.at.Before(beta.at) {
		t.Errorf("gamma, asked after beta, was answered %s before it", beta.at.Sub(gamma.at).Round(time.Millisecond))
	}
}

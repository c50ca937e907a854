package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/testkit"
	"modelserve/jobs"
)

// apiReplica is a replica as GET /api/v1/replicas says it.
type apiReplica struct {
	ID, Model, State, Detail string
	PID                      int
}

func (s *apiServer) replicas(model string) []apiReplica {
	s.t.Helper()
	var out struct{ Replicas []apiReplica }
	if code := s.do("GET", "/api/v1/replicas", nil, &out); code != http.StatusOK {
		s.t.Fatalf("replicas: %d", code)
	}
	var rs []apiReplica
	for _, r := range out.Replicas {
		if r.Model == model {
			rs = append(rs, r)
		}
	}
	return rs
}

// settled is whether model has n replicas, every one ready.
func (s *apiServer) settled(model string, n int) bool {
	rs := s.replicas(model)
	if len(rs) != n {
		return false
	}
	for _, r := range rs {
		if r.State != "ready" {
			return false
		}
	}
	return true
}

// load is a few clients asking for a model through the gateway, with the
// official OpenAI client and no retries of its own, half of the requests
// streamed, until stopped: steady traffic while replicas come and go.
type load struct {
	stop   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	sent   int
	failed []string
}

// maxLoad bounds the requests a load sends, whatever happens.
const maxLoad = 1500

func startLoad(base, token, model string, clients int) *load {
	l := &load{stop: make(chan struct{})}
	c := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey(token), option.WithMaxRetries(0),
		option.WithRequestTimeout(3*time.Minute))
	for i := range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				default:
				}
				l.mu.Lock()
				if l.sent >= maxLoad {
					l.mu.Unlock()
					return
				}
				l.sent++
				l.mu.Unlock()
				err := askOnce(c, model, 8, i, n)
				if err != nil {
					l.mu.Lock()
					l.failed = append(l.failed, err.Error())
					l.mu.Unlock()
				}
			}
		}()
	}
	return l
}

// end stops the clients and says how many requests were sent and which
// failed.
func (l *load) end() (sent int, failed []string) {
	close(l.stop)
	l.wg.Wait()
	return l.sent, l.failed
}

// TestNoRequestLostWhileReplicasRetire: under steady traffic from a few
// clients, an operator stops a replica, the model is scaled down, and an
// update is tried as a canary and promoted automatically (the model's
// replicas replaced, the canary's retired): every request is answered.
// Each retired replica drains first, and a request that meets one gone is
// sent to another.
func TestNoRequestLostWhileReplicasRetire(t *testing.T) {
	w := newUpdateWorld(t, testPolicy(20))
	s := w.s
	scale := func(n int) {
		t.Helper()
		if code := s.do("POST", "/api/v1/catalog/chatty/scale", map[string]int{"min": n, "max": n}, nil); code != http.StatusOK {
			t.Fatalf("scaling chatty to %d: %d", n, code)
		}
	}
	scale(2)
	testkit.WaitFor(t, 2*time.Minute, "two replicas of chatty ready", func() (bool, string) {
		return s.settled("chatty", 2), fmt.Sprintf("replicas %+v", s.replicas("chatty"))
	})

	l := startLoad(s.base, s.token, "chatty", 4)
	ended := false
	defer func() {
		if !ended {
			l.end()
		}
	}()
	time.Sleep(time.Second) // traffic on both
	began := time.Now()

	// An operator's Stop: the fleet places another.
	stopped := s.replicas("chatty")[0]
	if code := s.do("POST", "/api/v1/replicas/"+stopped.ID+"/stop", nil, nil); code != http.StatusAccepted {
		t.Fatalf("stopping %s: %d", stopped.ID, code)
	}
	testkit.WaitFor(t, 2*time.Minute, "chatty back to two ready replicas", func() (bool, string) {
		rs := s.replicas("chatty")
		return s.settled("chatty", 2) && rs[0].ID != stopped.ID && rs[1].ID != stopped.ID, fmt.Sprintf("replicas %+v", rs)
	})

	t.Logf("the Stop's replacement ready after %s", time.Since(began).Round(time.Millisecond))

	// A scale-down.
	scale(1)
	testkit.WaitFor(t, time.Minute, "chatty down to one replica", func() (bool, string) {
		return s.settled("chatty", 1), fmt.Sprintf("replicas %+v", s.replicas("chatty"))
	})
	t.Logf("scaled down after %s", time.Since(began).Round(time.Millisecond))

	// An automatic promotion: the canary is judged on the traffic.
	job := w.startUpdate(t)
	seen := s.watch(job.ID, 4*time.Minute)
	if last := seen[len(seen)-1]; last.State != jobs.Done {
		t.Fatalf("the update ended %s: %s\n%+v", last.State, last.Error, last.Steps)
	}
	t.Logf("promoted after %s", time.Since(began).Round(time.Millisecond))
	time.Sleep(time.Second) // the canary's replica retired under traffic

	sent, failed := l.end()
	ended = true
	t.Logf("%d requests through a Stop, a scale-down and a promotion", sent)
	if len(failed) > 0 {
		t.Errorf("%d of %d requests failed; the first: %s", len(failed), sent, failed[0])
	}
	if sent < 100 {
		t.Errorf("only %d requests were sent: the load did not run", sent)
	}
}

// TestAStreamCutByADyingEngineEndsInAnError: the engine is killed (-9) in
// the middle of a stream; the client's stream ends in an error event the
// official client raises, not in what reads as a whole answer, and the
// request is counted failed.
func TestAStreamCutByADyingEngineEndsInAnError(t *testing.T) {
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Tiny-Llama-GGUF", "Tiny-Llama-Q4_K_M.gguf", ggufgen.Spec{ContextLength: 8192})
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: t.TempDir(), HFEndpoint: hub.URL()})
	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Tiny-Llama-GGUF", "replicas": 1, "context_length": 4096, "ctx_pool": 4096}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d %+v", code, job)
	}
	if seen := s.watch(job.ID, 2*time.Minute); seen[len(seen)-1].State != jobs.Done {
		t.Fatalf("serving ended %s: %s", seen[len(seen)-1].State, seen[len(seen)-1].Error)
	}
	rs := s.replicas("tiny-llama")
	if len(rs) != 1 || rs[0].PID == 0 {
		t.Fatalf("replicas %+v, want one with a pid", rs)
	}

	c := openai.NewClient(option.WithBaseURL(s.base+"/v1/"), option.WithAPIKey(s.token), option.WithMaxRetries(0),
		option.WithRequestTimeout(2*time.Minute))
	st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: "tiny-llama", MaxTokens: openai.Int(1024), // its longest answer (max_output)
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell a long story.")},
	}, option.WithJSONSet("ignore_eos", true))
	defer st.Close()
	if !st.Next() {
		t.Fatalf("no first chunk: %v", st.Err())
	}
	if err := syscall.Kill(rs[0].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	chunks := 1
	for st.Next() {
		chunks++
	}
	err := st.Err()
	if err == nil || !strings.Contains(err.Error(), "broke off its answer before the end") {
		t.Fatalf("after %d chunks the stream ended with %v; want the gateway's error event", chunks, err)
	}

	// The gateway counts a request as it ends, which may be a moment
	// after the client read the error event.
	want := `modelserve_gateway_requests_total{model="tiny-llama",replica="` + rs[0].ID + `",status="502"} 1`
	testkit.WaitFor(t, 10*time.Second, "/metrics counting the cut stream as 502", func() (bool, string) {
		resp, err := http.Get(s.base + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		text, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(text), want), "no " + want + " in /metrics"
	})
}

// TestTheGatewayTellsATokenNothingOfOtherModels: a token limited to other
// models is answered for a model that exists exactly as for one that does
// not; a huge model name is not echoed back whole; and a model removed is
// gone from /v1/models at once.
func TestTheGatewayTellsATokenNothingOfOtherModels(t *testing.T) {
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Tiny-Llama-GGUF", "Tiny-Llama-Q4_K_M.gguf", ggufgen.Spec{ContextLength: 8192})
	data := madeDataDir(t)
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: data, HFEndpoint: hub.URL()})
	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Tiny-Llama-GGUF", "replicas": 0, "context_length": 2048, "ctx_pool": 2048}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d %+v", code, job)
	}
	if seen := s.watch(job.ID, 2*time.Minute); seen[len(seen)-1].State != jobs.Done {
		t.Fatalf("serving ended %s: %s", seen[len(seen)-1].State, seen[len(seen)-1].Error)
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"token", "create", "--data", data, "--models", "other", "app"},
		func(string) string { return "" }, nil, &out, &errb); err != nil {
		t.Fatal(err)
	}
	scoped := strings.TrimSpace(out.String())

	ask := func(tok, method, path string, body []byte) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, s.base+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	chat := func(model string) []byte {
		return fmt.Appendf(nil, `{"model": %q, "messages": [{"role": "user", "content": "hi"}]}`, model)
	}

	code, forbidden := ask(scoped, "POST", "/v1/chat/completions", chat("tiny-llama"))
	_, missing := ask(scoped, "POST", "/v1/chat/completions", chat("no-such-llama"))
	if code != http.StatusNotFound || forbidden != strings.ReplaceAll(missing, "no-such-llama", "tiny-llama") {
		t.Errorf("a model the token may not use: %d %s; want the 404 of one that does not exist: %s", code, forbidden, missing)
	}
	code, shown := ask(scoped, "GET", "/v1/models/tiny-llama", nil)
	_, shownMissing := ask(scoped, "GET", "/v1/models/no-such-llama", nil)
	if code != http.StatusNotFound || shown != strings.ReplaceAll(shownMissing, "no-such-llama", "tiny-llama") {
		t.Errorf("GET /v1/models/tiny-llama with the token: %d %s; want %s", code, shown, shownMissing)
	}

	huge := strings.Repeat("m", 1<<20)
	code, body := ask(s.token, "POST", "/v1/chat/completions", chat(huge))
	if code != http.StatusNotFound || len(body) > 1000 || !strings.Contains(body, `"mmmm`) {
		t.Errorf("a 1 MiB model name: %d, %d bytes back (%.200s); want a 404 quoting its beginning", code, len(body), body)
	}

	c := openai.NewClient(option.WithBaseURL(s.base+"/v1/"), option.WithAPIKey(s.token), option.WithMaxRetries(0))
	listed := func() bool {
		page, err := c.Models.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page.Data {
			if m.ID == "tiny-llama" {
				return true
			}
		}
		return false
	}
	if !listed() {
		t.Fatal("tiny-llama is not listed while served")
	}
	if code := s.do("DELETE", "/api/v1/catalog/tiny-llama", nil, nil); code != http.StatusOK && code != http.StatusNoContent {
		t.Fatalf("removing tiny-llama: %d", code)
	}
	if listed() {
		t.Error("tiny-llama is still listed by /v1/models right after it was removed")
	}
}

// askOnce is client i's n-th request to model through the official client,
// of at most most tokens: whole for an even n, streamed for an odd one. A
// stream that ends without a chunk is a failure, though it ended cleanly.
func askOnce(c openai.Client, model string, most int64, i, n int) error {
	params := openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(most),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("client %d says %d", i, n))}}
	if n%2 == 0 {
		_, err := c.Chat.Completions.New(context.Background(), params)
		return err
	}
	st := c.Chat.Completions.NewStreaming(context.Background(), params)
	defer st.Close()
	chunks := 0
	for st.Next() {
		chunks++
	}
	if err := st.Err(); err != nil || chunks > 0 {
		return err
	}
	return errors.New("a stream with no chunk")
}

package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/evals"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/llamatest"
	"modelserve/jobs"
)

// TestEvalsThroughTheAPI is the eval suites as a script uses them, with
// the real engine: serve a tiny chat model and a tiny embedding model, put
// a suite on each, run them and read the runs; run again and get the same
// verdicts; then stop modelserve in the middle of a run and find it failed
// after the restart.
func TestEvalsThroughTheAPI(t *testing.T) {
	engine := llamatest.Path(t)
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Chatty-GGUF", "Chatty-Q4_K_M.gguf", ggufgen.Spec{})
	tinyRepo(t, hub, "acme/Embedder-GGUF", "Embedder-F32.gguf",
		ggufgen.Spec{Pooling: new(uint32(1)), EmbeddingLength: 96, HeadCount: 6, HeadCountKV: 3})
	cfg := config{Addr: "127.0.0.1:0", Data: t.TempDir(), HFEndpoint: hub.URL(), LlamaServer: engine}
	s := startAPI(t, cfg)

	for _, repo := range []string{"acme/Chatty-GGUF", "acme/Embedder-GGUF"} {
		var job jobs.Job
		if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": repo, "replicas": 1, "context_length": 1024, "ctx_pool": 2048}, &job); code != http.StatusAccepted {
			t.Fatalf("serve %s: %d", repo, code)
		}
		if last := s.watch(job.ID, 3*time.Minute); last[len(last)-1].State != jobs.Done {
			t.Fatalf("serving %s ended %s: %s", repo, last[len(last)-1].State, last[len(last)-1].Error)
		}
	}

	put := func(model string, suite string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, s.base+"/api/v1/catalog/"+model+"/evals", strings.NewReader(suite))
		req.Header.Set("Authorization", "Bearer "+s.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for model, suite := range map[string]string{
		"chatty": `{"cases": [
			{"name": "says something", "prompt": "Say hello.", "max_tokens": 16, "expect": {"regex": "\\S"}},
			{"name": "capital", "prompt": "What is the capital of France? One word.", "max_tokens": 8, "expect": {"exact": "Paris"}},
			{"name": "order", "prompt": "Give the order as JSON.", "max_tokens": 24, "expect": {"json_schema": {"type": "object"}}}
		]}`,
		"embedder": `{"cases": [
			{"name": "itself", "expect": {"similarity": {"anchor": "a cat on a mat", "closer": "a cat on a mat", "farther": "a quarterly invoice"}}}
		]}`,
	} {
		if code, body := put(model, suite); code != http.StatusOK {
			t.Fatalf("PUT %s's suite: %d %s", model, code, body)
		}
	}
	if code, body := put("chatty", `{"cases": [{"name": "capital", "prompt": "p", "expect": {"regex": "(?i)paris("}}]}`); code != http.StatusBadRequest ||
		!strings.Contains(body, `case 1 (\"capital\"): expect.regex`) {
		t.Errorf("PUT an invalid suite: %d %s", code, body)
	}
	if code, _ := put("nobody", `{"cases": []}`); code != http.StatusNotFound {
		t.Errorf("PUT the suite of an unknown model: %d", code)
	}

	var chatty catalog.Model
	s.do("GET", "/api/v1/catalog/chatty", nil, &chatty)
	first := runEvals(t, s, "chatty")
	if first.State != evals.StateDone || first.Passed != 1 || first.Total != 3 || chatty.Origin == nil || first.Commit != chatty.Origin.Revision {
		t.Fatalf("chatty's run: %+v; want done, 1 of 3 passed, at the commit it runs", first)
	}
	if r := first.Results; !r[0].Pass || r[1].Pass || !strings.HasPrefix(r[1].Reason, `the answer is not "Paris": `) || r[2].Pass || r[2].Reason == "" {
		t.Errorf("chatty's results: %+v", r)
	}
	if emb := runEvals(t, s, "embedder"); emb.State != evals.StateDone || emb.Passed != 1 || !emb.Results[0].Pass {
		t.Errorf("embedder's run: %+v; want the anchor nearest itself", emb)
	}
	again := runEvals(t, s, "chatty")
	for i := range first.Results {
		if a, b := first.Results[i], again.Results[i]; a.Answer != b.Answer || a.Pass != b.Pass {
			t.Errorf("%s: %q then %q: the same suite ran twice differs", a.Case, a.Answer, b.Answer)
		}
	}
	var list struct{ Runs []evals.Run }
	if s.do("GET", "/api/v1/catalog/chatty/evals", nil, &list); len(list.Runs) != 2 || list.Runs[0].ID != again.ID {
		t.Errorf("chatty's runs, newest first: %+v", list.Runs)
	}
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`modelserve_eval_runs_total{result="done"} 3`, `modelserve_eval_cases_total{result="pass"} 3`, `modelserve_eval_cases_total{result="fail"} 4`} {
		if !strings.Contains(string(text), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// A long suite, stopped in the middle by modelserve stopping: after
	// the restart the run is failed, saying how far it got.
	var cases []string
	for i := 1; i <= 100; i++ {
		cases = append(cases, fmt.Sprintf(`{"name": "long %d", "prompt": "Tell a long story, number %d.", "max_tokens": 512, "expect": {"regex": "\\S"}}`, i, i))
	}
	if code, body := put("chatty", `{"cases": [`+strings.Join(cases, ",")+`]}`); code != http.StatusOK {
		t.Fatalf("PUT the long suite: %d %s", code, body)
	}
	var run evals.Run
	if code := s.do("POST", "/api/v1/catalog/chatty/evals/run", nil, &run); code != http.StatusAccepted || run.State != evals.StateRunning {
		t.Fatalf("POST run: %d %+v", code, run)
	}
	s.stop()
	s = startAPI(t, cfg)
	var got evals.Run
	if code := s.do("GET", fmt.Sprintf("/api/v1/evals/runs/%d", run.ID), nil, &got); code != 200 || got.State != evals.StateFailed ||
		!strings.HasPrefix(got.Error, "modelserve stopped while the run was running, after ") || !strings.HasSuffix(got.Error, " of 100 cases: run it again") ||
		len(got.Results) >= 100 {
		t.Errorf("the run stopped by a restart: %d %+v", code, got)
	}
	t.Logf("the run stopped by a restart: %s", got.Error)
}

// runEvals runs model's suite through the API and waits for the run to end.
func runEvals(t *testing.T, s *apiServer, model string) evals.Run {
	t.Helper()
	var run evals.Run
	if code := s.do("POST", "/api/v1/catalog/"+model+"/evals/run", nil, &run); code != http.StatusAccepted || run.ID == 0 {
		t.Fatalf("POST %s's run: %d %+v", model, code, run)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for run.State == evals.StateRunning {
		if time.Now().After(deadline) {
			t.Fatalf("run %d still running after 2 minutes: %+v", run.ID, run)
		}
		time.Sleep(20 * time.Millisecond)
		if code := s.do("GET", fmt.Sprintf("/api/v1/evals/runs/%d", run.ID), nil, &run); code != 200 {
			t.Fatalf("GET run %d: %d", run.ID, code)
		}
	}
	return run
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/updates"
	"modelserve/jobs"
)

// hook is a chat webhook on loopback: it keeps each notice posted, or
// refuses them (403) while refuse is set.
type hook struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	got    []map[string]any
	refuse bool
}

func newHook(t *testing.T) *hook {
	h := &hook{t: t}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		b, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.refuse {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Errorf("a notice that is not JSON: %s", b)
		}
		h.got = append(h.got, m)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// notices are those of kind the webhook got.
func (h *hook) notices(kind string) []map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]any
	for _, m := range h.got {
		if m["event"] == kind {
			out = append(out, m)
		}
	}
	return out
}

// wait is the first notice of kind, once it has come.
func (h *hook) wait(kind string) map[string]any {
	h.t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if n := h.notices(kind); len(n) > 0 {
			return n[0]
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.t.Fatalf("no %s notice came; the webhook got %v", kind, h.got)
	return nil
}

// TestNotifyURL is --notify-url as an operator's chat webhook sees it: a
// job that fails and new weights noticed each arrive as a JSON POST with a
// text naming the model; a webhook that refuses costs a failure counted in
// /metrics and holds up nothing.
func TestNotifyURL(t *testing.T) {
	h := newHook(t)
	hub := hubtest.New(t)
	const id, file = "acme/Tiny-GGUF", "Tiny-Q4_K_M.gguf"
	hub.AddRepo(id, hubtest.RepoOptions{})
	served := hub.AddFile(id, file, ggufgen.Bytes(ggufgen.Spec{}))
	hub.AddRepo("acme/Broken-GGUF", hubtest.RepoOptions{})
	hub.AddFile("acme/Broken-GGUF", "Broken-Q4_K_M.gguf", bytes.Repeat([]byte("not a model "), 1000))
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: t.TempDir(), HFEndpoint: hub.URL(), NotifyURL: h.srv.URL})

	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Broken-GGUF", "replicas": 0}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d", code)
	}
	s.watch(job.ID, 2*time.Minute)
	n := h.wait("job_failed")
	if text, _ := n["text"].(string); n["job"] != job.ID || !strings.Contains(text, "job "+job.ID) ||
		!strings.Contains(text, "acme/Broken-GGUF") || !strings.Contains(text, "check step") {
		t.Errorf("the job's notice: %v", n)
	}

	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": id, "replicas": 0}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d", code)
	}
	if seen := s.watch(job.ID, 2*time.Minute); seen[len(seen)-1].State != jobs.Done {
		t.Fatalf("job ended %s: %s", seen[len(seen)-1].State, seen[len(seen)-1].Error)
	}
	moved := hub.AddFile(id, file, ggufgen.Bytes(ggufgen.Spec{ContextLength: 8192}))
	var res updates.Result
	if code := s.do("POST", "/api/v1/catalog/tiny/check", nil, &res); code != 200 || res.Result != updates.ResultUpdateAvailable {
		t.Fatalf("check: %d %+v", code, res)
	}
	n = h.wait("update_noticed")
	want := "modelserve: new weights for tiny: " + id + " moved from " + served[:7] + " to " + moved[:7]
	if n["text"] != want || n["model"] != "tiny" {
		t.Errorf("the update's notice: %v, want the text %q", n, want)
	}
	if len(h.notices("update_noticed")) != 1 || len(h.notices("job_failed")) != 1 {
		t.Errorf("want one notice of each kind")
	}

	// A webhook that refuses: the job still ends, and the lost notice is
	// counted.
	h.mu.Lock()
	h.refuse = true
	h.mu.Unlock()
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Broken-GGUF", "name": "broken-2", "replicas": 0}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d", code)
	}
	if seen := s.watch(job.ID, 2*time.Minute); seen[len(seen)-1].State != jobs.Failed {
		t.Fatalf("the job ended %s", seen[len(seen)-1].State)
	}
	const lost = `modelserve_notice_failures_total{reason="failed"} 1`
	var text string
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		resp, err := http.Get(s.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if text = string(b); strings.Contains(text, lost) {
			break
		}
	}
	for _, want := range []string{lost, "modelserve_notices_sent_total 2"} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestNotifyURLIsChecked(t *testing.T) {
	_, err := parseServe([]string{"--notify-url", "hooks.example.com/x"}, func(string) string { return "" }, io.Discard)
	var u usageError
	if err == nil || !strings.Contains(err.Error(), "--notify-url") || !errors.As(err, &u) {
		t.Errorf("got %v, want a usage error naming --notify-url", err)
	}
}

// TestNoticesOfATrial: an update promoted, and one rolled back, by an
// operator's hand, each reach the webhook naming the model and the commit.
func TestNoticesOfATrial(t *testing.T) {
	for _, tc := range []struct{ action, kind, want string }{
		{"promote", "promoted", "modelserve: chatty promoted: it now serves "},
		{"rollback", "rolled_back", "modelserve: the update of chatty to "},
	} {
		t.Run(tc.action, func(t *testing.T) {
			h := newHook(t)
			w := newUpdateWorld(t, testPolicy(200))
			w.s.stop()
			w.cfg.NotifyURL = h.srv.URL
			w.s = startAPI(t, w.cfg)
			job := w.startUpdate(t)
			if job.Ended() {
				t.Fatalf("the update ended before its trial: %s %s", job.State, job.Error)
			}
			if code := w.s.do("POST", "/api/v1/catalog/chatty/"+tc.action, nil, nil); code != http.StatusOK {
				t.Fatalf("%s: %d", tc.action, code)
			}
			n := h.wait(tc.kind)
			if text, _ := n["text"].(string); n["model"] != "chatty" || !strings.HasPrefix(text, tc.want) || !strings.Contains(text, w.moved[:7]) {
				t.Errorf("the notice: %v, want a text beginning %q naming %s", n, tc.want, w.moved[:7])
			}
		})
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// client runs a client command against s, with the address and token from
// the environment as a terminal's shell would give them.
func (s *apiServer) client(stdin string, args ...string) (stdout, stderr string, err error) {
	return s.clientWith(s.token, stdin, args...)
}

func (s *apiServer) clientWith(token, stdin string, args ...string) (stdout, stderr string, err error) {
	var out, errb bytes.Buffer
	err = run(context.Background(), args, s.env(token), strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), err
}

// gatewayRequests is how many requests the gateway has sent model, from
// /metrics.
func (s *apiServer) gatewayRequests(model string) int {
	s.t.Helper()
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	n := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, `modelserve_gateway_requests_total{model="`+model+`"`) {
			continue
		}
		v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		n += int(v)
	}
	return n
}

// TestClientCommands drives a running server from the terminal: plan a
// repository, serve it following the job's steps, list the catalog, and
// chat with the model through the gateway on the real engine; a job that
// fails, a wrong token and an unknown model each end in an error (exit 1)
// with the server's sentence.
func TestClientCommands(t *testing.T) {
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Tiny-Llama-GGUF", "Tiny-Llama-Q4_K_M.gguf", ggufgen.Spec{ContextLength: 8192})
	hub.AddRepo("acme/Broken-GGUF", hubtest.RepoOptions{})
	hub.AddFile("acme/Broken-GGUF", "Broken-Q4_K_M.gguf", bytes.Repeat([]byte("not a model "), 1000))
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: madeDataDir(t), HFEndpoint: hub.URL()})

	out, _, err := s.client("", "model", "plan", "acme/Tiny-Llama-GGUF")
	if err != nil {
		t.Fatalf("model plan: %v", err)
	}
	for _, want := range []string{"acme/Tiny-Llama-GGUF at ", "serves Q4_K_M", "Tiny-Llama-Q4_K_M *", "CPU"} {
		if !strings.Contains(out, want) {
			t.Errorf("model plan lacks %q:\n%s", want, out)
		}
	}

	out, said, err := s.client("", "model", "serve", "--context", "2048", "--wait", "acme/Tiny-Llama-GGUF")
	if err != nil {
		t.Fatalf("model serve --wait: %v\n%s%s", err, out, said)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// Each step as it ends; a step's running line shows only when the
	// stream is open before it ends, which a fast job outruns.
	for _, want := range []string{"registry   done", "mirror     done", "smoke test done"} {
		if !strings.Contains(out, want) {
			t.Errorf("model serve --wait did not show %q:\n%s", want, out)
		}
	}
	if last := lines[len(lines)-1]; last != "tiny-llama is served: modelserve chat tiny-llama" {
		t.Errorf("model serve --wait ended with %q", last)
	}
	if !strings.HasPrefix(said, "job ") {
		t.Errorf("model serve --wait said %q, want the job's ID", said)
	}

	out, _, err = s.client("", "model", "list")
	if err != nil || !strings.Contains(out, "tiny-llama") || !strings.Contains(out, "acme/Tiny-Llama-GGUF") {
		t.Errorf("model list: %v\n%s", err, out)
	}

	before := s.gatewayRequests("tiny-llama")
	out, _, err = s.client("", "chat", "--max-tokens", "8", "tiny-llama", "Say", "hello.")
	if err != nil || strings.TrimSpace(out) == "" {
		t.Errorf("chat with a message: %v, printed %q", err, out)
	}
	out, _, err = s.client("Say hello.\n\nAnd again.\n", "chat", "--max-tokens", "8", "tiny-llama")
	if err != nil || strings.TrimSpace(out) == "" {
		t.Errorf("chat from standard input: %v, printed %q", err, out)
	}
	if got := s.gatewayRequests("tiny-llama") - before; got != 3 {
		t.Errorf("the chats sent %d requests through the gateway, want 3 (one, then a line each, the empty one skipped)", got)
	}

	for _, tc := range []struct {
		name  string
		token string
		args  []string
		want  string
		shown string
	}{
		{"a job that fails", s.token, []string{"model", "serve", "--wait", "acme/Broken-GGUF"}, "failed: ", "failed"},
		{"no such repository", s.token, []string{"model", "plan", "acme/Nothing-Here"}, "acme/Nothing-Here", ""},
		{"a wrong token", "ms_not-a-token-anyone-made", []string{"model", "list"}, "refused the token (401)", ""},
		{"an unknown model", s.token, []string{"chat", "gpt-4o", "hi"}, `"gpt-4o"`, ""},
		{"no token", "", []string{"model", "list"}, "set MODELSERVE_TOKEN", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := s.clientWith(tc.token, "", tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
			if !strings.Contains(out, tc.shown) {
				t.Errorf("printed %q, want %q in it", out, tc.shown)
			}
		})
	}
}

// TestReadSSE reads events as EventSource does: named, several data lines
// joined, comments skipped; an event longer than the bound is refused.
func TestReadSSE(t *testing.T) {
	stream := ": hello\nevent: job\ndata: {\"a\":\ndata: 1}\nid: 3\n\ndata: [DONE]\n\n"
	var got []string
	err := readSSE(strings.NewReader(stream), func(event string, data []byte) error {
		got = append(got, event+"="+string(data))
		return nil
	})
	if err != nil || strings.Join(got, "|") != "job={\"a\":\n1}|message=[DONE]" {
		t.Errorf("got %q, %v", got, err)
	}
	long := "data: " + strings.Repeat("x", maxStreamLine+1) + "\n\n"
	if err := readSSE(strings.NewReader(long), func(string, []byte) error { return nil }); err == nil {
		t.Error("an event longer than the bound was read")
	}
}

// TestServeWaitFollowsAStreamThatBreaks: --wait opens the job's events
// again when they stop before the job ends, and gives up, saying so, when
// they keep stopping with nothing new.
func TestServeWaitFollowsAStreamThatBreaks(t *testing.T) {
	running := `{"id":"j1","state":"running","steps":[{"name":"registry","state":"running"}]}`
	done := `{"id":"j1","state":"done","model":"tiny","steps":[{"name":"registry","state":"done"}]}`
	var mu sync.Mutex
	opened := 0
	ends := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/serve":
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, running)
		case "/api/v1/jobs/j1/events":
			mu.Lock()
			opened++
			n, end := opened, ends
			mu.Unlock()
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: job\ndata: "+running+"\n\n")
			if end && n == 2 {
				io.WriteString(w, "event: end\ndata: "+done+"\n\n")
			}
		}
	}))
	defer srv.Close()
	s := &apiServer{t: t, base: srv.URL, token: "ms_x"}

	out, _, err := s.client("", "model", "serve", "--wait", "acme/Tiny-GGUF")
	if err != nil || !strings.Contains(out, "registry   done") || opened != 2 {
		t.Fatalf("a stream that broke once: %v after %d connections\n%s", err, opened, out)
	}

	mu.Lock()
	opened, ends = 0, false
	mu.Unlock()
	_, _, err = s.client("", "model", "serve", "--wait", "acme/Tiny-GGUF")
	if err == nil || !strings.Contains(err.Error(), "stopped 5 times before it ended") || opened != 6 {
		t.Errorf("a stream that never ends: %v after %d connections, want an error after 6", err, opened)
	}
}

// TestPsFollowsNext: ps lists the replicas of every page of
// /api/v1/replicas, following each page's next, not the first page alone.
func TestPsFollowsNext(t *testing.T) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.RequestURI())
		switch r.URL.Query().Get("after") {
		case "":
			io.WriteString(w, `{"replicas":[{"id":"alpha-1","model":"alpha","state":"ready"}],"models":[{"model":"alpha"}],`+
				`"next":"/api/v1/replicas?after=alpha&limit=500"}`)
		case "alpha":
			io.WriteString(w, `{"replicas":[{"id":"beta-1","model":"beta","state":"starting"}],"models":[{"model":"beta"}]}`)
		default:
			http.Error(w, "no such page", http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	s := &apiServer{t: t, base: srv.URL, token: "ms_x"}
	out, _, err := s.client("", "ps")
	if err != nil || !strings.Contains(out, "alpha-1") || !strings.Contains(out, "beta-1") || len(asked) != 2 {
		t.Errorf("ps over two pages asked %v: %v\n%s", asked, err, out)
	}
}

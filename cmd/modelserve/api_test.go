package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/auth"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
	"modelserve/internal/llamatest"
	"modelserve/internal/testkit"
	"modelserve/internal/testlog"
	"modelserve/jobs"
)

// apiServer is modelserve as serve runs it, against a hubtest registry, with
// an API token for the test.
type apiServer struct {
	t     testing.TB
	base  string
	token string
	stop  func()
	// logs is what serve has logged so far.
	logs *testlog.Buffer
}

func startAPI(t testing.TB, cfg config) *apiServer {
	t.Helper()
	// A token made the way `modelserve token create` makes one, before the
	// server opens the same database.
	db := testkit.OpenDBFile(t, filepath.Join(cfg.Data, "modelserve.db"))
	tok, err := auth.NewTokens(db).Create(context.Background(), "test-"+time.Now().Format("150405.000000"))
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	// The engines of a server in the test's own process end with it:
	// none outlives the test.
	cfg.StopEnginesOnExit = true
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	var logs testlog.Buffer
	// Times to the nanosecond, not slog's millisecond: the benchmarks
	// measure spans of a few milliseconds between the fleet's lines.
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey && len(groups) == 0 {
			a.Value = slog.StringValue(a.Value.Time().Format(time.RFC3339Nano))
		}
		return a
	}}))
	go func() { done <- serve(ctx, cfg, log, func(a string) { addrc <- a }) }()
	s := &apiServer{t: t, token: tok, logs: &logs}
	select {
	case a := <-addrc:
		s.base = "http://" + a
	case err := <-done:
		t.Fatalf("serve stopped before listening: %v\n%s", err, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start listening")
	}
	stopped := false
	s.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve returned %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
	}
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	return s
}

func (s *apiServer) do(method, path string, body any, out any) int {
	s.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.base+path, r)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			s.t.Fatalf("%s %s: %s: %v", method, path, b, err)
		}
	}
	return resp.StatusCode
}

// watch reads the job's event stream until the job ends, and returns every
// job state it saw in order.
func (s *apiServer) watch(id string, limit time.Duration) []jobs.Job {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.base+"/api/v1/jobs/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		s.t.Fatalf("events: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	var seen []jobs.Job
	var data strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			data.WriteString(d)
			continue
		}
		if line != "" || data.Len() == 0 {
			continue
		}
		var j jobs.Job
		if err := json.Unmarshal([]byte(data.String()), &j); err != nil {
			s.t.Fatalf("event data is not a job: %s", data.String())
		}
		data.Reset()
		seen = append(seen, j)
		if j.Ended() {
			return seen
		}
	}
	s.t.Fatalf("the event stream ended before the job did (%v); saw %d events", sc.Err(), len(seen))
	return nil
}

func tinyRepo(t testing.TB, hub *hubtest.Server, id, file string, spec ggufgen.Spec) {
	t.Helper()
	hub.AddRepo(id, hubtest.RepoOptions{})
	hub.AddFile(id, file, ggufgen.Bytes(spec))
}

func TestServeThroughTheAPI(t *testing.T) {
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Tiny-Llama-GGUF", "Tiny-Llama-Q4_K_M.gguf", ggufgen.Spec{ContextLength: 8192})
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: t.TempDir(), HFEndpoint: hub.URL()})

	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Tiny-Llama-GGUF", "replicas": 0, "context_length": 2048, "ctx_pool": 4096}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d %+v", code, job)
	}
	seen := s.watch(job.ID, 2*time.Minute)
	last := seen[len(seen)-1]
	if last.State != jobs.Done {
		t.Fatalf("job ended %s: %s\n%+v", last.State, last.Error, last.Steps)
	}
	if len(seen) < 3 {
		t.Errorf("saw %d events; want the snapshot and the changes after it", len(seen))
	}
	mirrorStep, ok := last.Step(jobs.StepMirror)
	if !ok || !strings.Contains(mirrorStep.Detail, "checksums match the registry") {
		t.Errorf("mirror step: %+v", mirrorStep)
	}

	var m catalog.Model
	if code := s.do("GET", "/api/v1/catalog/"+last.Model, nil, &m); code != 200 {
		t.Fatalf("catalog/%s: %d", last.Model, code)
	}
	if m.Name != "tiny-llama" || m.ContextLength != 2048 || m.Origin == nil || m.Origin.Repo != "acme/Tiny-Llama-GGUF" ||
		m.Origin.Revision != hub.Commit("acme/Tiny-Llama-GGUF", "main") {
		t.Errorf("catalog entry: %+v origin %+v", m, m.Origin)
	}
	// Where the mirror keeps it, relative to the mirror: never a path on
	// this machine.
	if want := "tiny-llama/" + hf.Short(hub.Commit("acme/Tiny-Llama-GGUF", "main")) + "/Tiny-Llama-Q4_K_M.gguf"; m.Source != want {
		t.Errorf("source %q, want the mirrored file %q", m.Source, want)
	}
	if p := m.Profiles[0]; p.Pool != 4096 || p.Slots != 2 || p.Context() != 2048 {
		t.Errorf("profile %+v, want a 4096 pool in 2 slots of 2048", p)
	}

	var list struct {
		Jobs  []jobs.Job `json:"jobs"`
		Total int        `json:"total"`
	}
	if s.do("GET", "/api/v1/jobs", nil, &list); list.Total != 1 || len(list.Jobs) != 1 || list.Jobs[0].ID != job.ID {
		t.Errorf("jobs list: %+v", list)
	}
	var files struct {
		Files []struct {
			Path, State string
		} `json:"files"`
	}
	if s.do("GET", "/api/v1/mirror", nil, &files); len(files.Files) != 1 || files.Files[0].State != "present" {
		t.Errorf("mirror list: %+v", files)
	}

	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	size := len(ggufgen.Bytes(ggufgen.Spec{ContextLength: 8192}))
	for _, want := range []string{
		"modelserve_jobs_started_total 1",
		`modelserve_jobs_ended_total{state="done"} 1`,
		"modelserve_catalog_models 1",
		fmt.Sprintf("modelserve_mirror_fetched_bytes_total %d", size),
		`modelserve_step_duration_seconds_count{step="mirror"} 1`,
	} {
		if !strings.Contains(string(text), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestAPIRefusals(t *testing.T) {
	hub := hubtest.New(t)
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: t.TempDir(), HFEndpoint: hub.URL()})
	tests := []struct {
		name       string
		method     string
		path       string
		token      string
		body       any
		wantStatus int
		wantError  string
	}{
		{"no token", "GET", "/api/v1/jobs", "-", nil, 401, "the API needs a token"},
		{"a forged token", "GET", "/api/v1/catalog", "ms_forged", nil, 401, "not one modelserve issued"},
		{"not a repository", "POST", "/api/v1/serve", "", map[string]any{"repo": "no-slash"}, 400, "is not a repository"},
		{"a misspelt field", "POST", "/api/v1/serve", "", map[string]any{"repo": "a/b", "replica": 1}, 400, "unknown field"},
		{"negative replicas", "POST", "/api/v1/serve", "", map[string]any{"repo": "a/b", "replicas": -1}, 400, "cannot be negative"},
		{"no such job", "GET", "/api/v1/jobs/serve-1-00", "", nil, 404, ""},
		{"no such model", "DELETE", "/api/v1/catalog/nothing", "", nil, 404, "nothing"},
		{"no such route", "GET", "/api/v1/frobnicate", "", nil, 404, "no API route"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b io.Reader
			if tt.body != nil {
				j, _ := json.Marshal(tt.body)
				b = bytes.NewReader(j)
			}
			req, _ := http.NewRequest(tt.method, s.base+tt.path, b)
			switch tt.token {
			case "":
				req.Header.Set("Authorization", "Bearer "+s.token)
			case "-":
			default:
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e struct{ Error string }
			json.NewDecoder(resp.Body).Decode(&e)
			if resp.StatusCode != tt.wantStatus || e.Error == "" || !strings.Contains(e.Error, tt.wantError) {
				t.Errorf("%s %s: %d %q, want %d with %q", tt.method, tt.path, resp.StatusCode, e.Error, tt.wantStatus, tt.wantError)
			}
		})
	}
	var list struct{ Total int }
	if s.do("GET", "/api/v1/jobs", nil, &list); list.Total != 0 {
		t.Errorf("refused requests left %d jobs behind", list.Total)
	}
	// Open to anyone.
	for _, p := range []string{"/healthz", "/metrics"} {
		resp, err := http.Get(s.base + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %s without credentials", p, resp.Status)
		}
	}
}

// TestRestartMidFetch stops the server while a file trickles in and starts
// a new one on the same data directory: the job finishes, and the registry
// serves the file about once, not twice. (The planner reads each start's
// header too, a MiB at most: the file is large enough for that not to
// matter.)
func TestRestartMidFetch(t *testing.T) {
	hub := hubtest.New(t)
	const id, file = "acme/Slow-GGUF", "Slow-Q4_K_M.gguf"
	body := ggufgen.Bytes(ggufgen.Spec{PadTo: 32 << 20})
	hub.AddRepo(id, hubtest.RepoOptions{})
	hub.AddFile(id, file, body)
	hub.Trickle(id, file, int64(len(body))/4) // about four seconds
	cfg := config{Addr: "127.0.0.1:0", Data: t.TempDir(), HFEndpoint: hub.URL()}

	first := startAPI(t, cfg)
	var job jobs.Job
	first.do("POST", "/api/v1/serve", map[string]any{"repo": id, "replicas": 0}, &job)
	deadline := time.Now().Add(time.Minute)
	for {
		var j jobs.Job
		first.do("GET", "/api/v1/jobs/"+job.ID, nil, &j)
		if st, ok := j.Step(jobs.StepMirror); ok && st.BytesDone > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the fetch never began")
		}
		time.Sleep(50 * time.Millisecond)
	}
	first.stop()
	hub.ClearFaults(id, file)

	second := startAPI(t, cfg)
	seen := second.watch(job.ID, 2*time.Minute)
	if last := seen[len(seen)-1]; last.State != jobs.Done {
		t.Fatalf("after a restart the job ended %s: %s", last.State, last.Error)
	}
	if served := hub.BytesServed(id, file); served > int64(len(body))*5/4 {
		t.Errorf("the registry served %d bytes of a %d-byte file: the fetch started over rather than resuming", served, len(body))
	}
}

// TestServeToAReplicaThroughTheAPI is the whole product as a script sees
// it: serve a model with one replica, watch the job to its smoke test,
// find the replica ready, and see that stopping modelserve leaves no engine
// behind.
func TestServeToAReplicaThroughTheAPI(t *testing.T) {
	engine := llamatest.Path(t)
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Chatty-GGUF", "Chatty-Q4_K_M.gguf", ggufgen.Spec{})
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: t.TempDir(), HFEndpoint: hub.URL(), LlamaServer: engine})

	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Chatty-GGUF", "replicas": 1, "context_length": 1024, "ctx_pool": 2048}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d", code)
	}
	seen := s.watch(job.ID, 3*time.Minute)
	last := seen[len(seen)-1]
	if last.State != jobs.Done {
		t.Fatalf("job ended %s: %s\n%+v", last.State, last.Error, last.Steps)
	}
	smoke, _ := last.Step(jobs.StepSmoke)
	if smoke.State != jobs.Done || last.Reply == "" || last.TokensPerSecond <= 0 {
		t.Errorf("smoke test %+v, reply %q at %.1f tokens/s: want a real answer", smoke, last.Reply, last.TokensPerSecond)
	}

	var reps struct {
		Replicas []struct {
			ID, Model, State, Endpoint string
			PID                        int `json:"pid"`
			Load                       *struct {
				Slots int `json:"slots"`
			} `json:"load"`
		} `json:"replicas"`
		Starts []struct {
			Replica, Model string
			Context        int   `json:"context"`
			Slots          int   `json:"slots"`
			Estimate       int64 `json:"estimate_bytes"`
			RSS            int64 `json:"rss_bytes"`
		} `json:"starts"`
	}
	// The start is kept once the engine's memory has settled after it
	// was ready, which may be a moment after the job's answer.
	testkit.WaitFor(t, 10*time.Second, "chatty's start kept in the history", func() (bool, string) {
		if code := s.do("GET", "/api/v1/replicas", nil, &reps); code != 200 || len(reps.Replicas) != 1 {
			t.Fatalf("replicas: %d %+v", code, reps)
		}
		return len(reps.Starts) > 0, fmt.Sprintf("starts %+v", reps.Starts)
	})
	r := reps.Replicas[0]
	if r.Model != "chatty" || r.State != "ready" || r.PID == 0 || !strings.HasPrefix(r.Endpoint, "http://127.0.0.1:") {
		t.Errorf("replica %+v, want chatty ready on loopback with a pid", r)
	}
	if r.Load == nil || r.Load.Slots != 2 {
		t.Errorf("replica's load %+v, want the engine's 2 slots", r.Load)
	}
	if len(reps.Starts) != 1 || reps.Starts[0].Replica != r.ID || reps.Starts[0].Context != 2048 || reps.Starts[0].Slots != 2 ||
		reps.Starts[0].Estimate <= 0 || reps.Starts[0].RSS <= 0 {
		t.Errorf("starts %+v, want %s's start with its estimate and measured memory", reps.Starts, r.ID)
	} else {
		t.Logf("chatty: estimated %d bytes, measured %d", reps.Starts[0].Estimate, reps.Starts[0].RSS)
	}

	s.stop()
	if err := syscall.Kill(r.PID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("engine %d is still there after modelserve stopped (kill 0: %v)", r.PID, err)
		syscall.Kill(-r.PID, syscall.SIGKILL)
	}
}

// TestMirrorFilesForNodes fetches a mirrored file as a node would: with the
// token, in two ranges (as curl -C - resumes), and not at all without it.
func TestMirrorFilesForNodes(t *testing.T) {
	hub := hubtest.New(t)
	body := ggufgen.Bytes(ggufgen.Spec{})
	tinyRepo(t, hub, "acme/Tiny-GGUF", "Tiny-Q4_K_M.gguf", ggufgen.Spec{})
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: t.TempDir(), HFEndpoint: hub.URL()})
	var job jobs.Job
	s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Tiny-GGUF", "replicas": 0}, &job)
	if last := s.watch(job.ID, time.Minute); last[len(last)-1].State != jobs.Done {
		t.Fatalf("job: %+v", last[len(last)-1])
	}
	u := s.base + "/mirror/tiny/" + hub.Commit("acme/Tiny-GGUF", "main")[:7] + "/Tiny-Q4_K_M.gguf"

	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a mirrored file without a token: %s", resp.Status)
	}
	var got []byte
	for _, rng := range []string{"bytes=0-999", "bytes=1000-"} {
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", "Bearer "+s.token)
		req.Header.Set("Range", rng)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusPartialContent {
			t.Fatalf("%s: %s", rng, resp.Status)
		}
		got = append(got, b...)
	}
	if !bytes.Equal(got, body) {
		t.Errorf("the two ranges give %d bytes that are not the file (%d bytes)", len(got), len(body))
	}
}

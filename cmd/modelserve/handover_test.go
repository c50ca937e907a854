package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"modelserve/internal/evals"
	"modelserve/internal/fleet"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/llamatest"
	"modelserve/internal/testkit"
	"modelserve/jobs"
)

// handoverServer is modelserve's binary serving a data folder, started as
// an operator starts it, with a token for its API.
type handoverServer struct {
	bin, data string
	env       []string
	first     *killable
	api       *apiServer
}

func startHandoverServer(t testing.TB, hub *hubtest.Server, engine string) *handoverServer {
	t.Helper()
	b := newBinaryFolder(t, hub, engine, "handover")
	// Its engines outlive each process, as an operator's do, for the next
	// to adopt; the test ends them itself once the last has stopped.
	for i, kv := range b.env {
		if strings.HasPrefix(kv, "MODELSERVE_STOP_ENGINES_ON_EXIT=") {
			b.env[i] = "MODELSERVE_STOP_ENGINES_ON_EXIT=false"
		}
	}
	h := &handoverServer{bin: b.bin, env: b.env, data: b.data}
	h.first = b.start(t)
	h.api = &apiServer{t: t, base: h.first.base, token: b.token}
	// The processes that took over are not the one the test started:
	// each is stopped as an operator would, through its pid file; then
	// the engines it left running.
	t.Cleanup(func() {
		engines := h.enginePIDs()
		h.stopServing(t)
		if h.first.pid != 0 && !gone(h.first.pid) {
			syscall.Kill(h.first.pid, syscall.SIGTERM)
			testkit.WaitFor(t, 30*time.Second, "the first modelserve stopped", func() (bool, string) { return gone(h.first.pid), "" })
		}
		for _, pid := range engines {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return h
}

// enginePIDs are the engines the serving process runs, by replica.
func (h *handoverServer) enginePIDs() map[string]int {
	var reps struct{ Replicas []fleet.Replica }
	h.api.do("GET", "/api/v1/replicas", nil, &reps)
	out := map[string]int{}
	for _, r := range reps.Replicas {
		if r.PID > 0 {
			out[r.ID] = r.PID
		}
	}
	return out
}

// servingPID is the pid the data folder's pid file names, 0 without one.
func (h *handoverServer) servingPID() int {
	pid, _, err := readPIDFile(h.data)
	if err != nil {
		return 0
	}
	return pid
}

// stopServing stops whichever process serves the data folder now.
func (h *handoverServer) stopServing(t testing.TB) {
	pid := h.servingPID()
	if pid == 0 || pid == h.first.pid {
		return
	}
	syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Errorf("modelserve (pid %d) did not stop within 30s of SIGTERM; killing it", pid)
			syscall.Kill(pid, syscall.SIGKILL)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitTakeover waits until a process other than old serves the data
// folder and old has exited. (The old one's output pipes stay open while
// the new one, which inherited them, runs.)
func (h *handoverServer) awaitTakeover(t testing.TB, old int) int {
	t.Helper()
	var pid int
	testkit.WaitFor(t, 3*time.Minute, "a new modelserve serving the data folder", func() (bool, string) {
		pid = h.servingPID()
		return pid != 0 && pid != old, fmt.Sprintf("the pid file names %d\n%s", pid, h.first.logs.String())
	})
	testkit.WaitFor(t, time.Minute, "the old modelserve exited", func() (bool, string) {
		return gone(old), fmt.Sprintf("pid %d runs\n%s", old, h.first.logs.String())
	})
	return pid
}

// gone is whether process pid has exited: the test reaps the first
// modelserve only once its output pipes close, so it is a zombie until then.
func gone(pid int) bool {
	f, err := procStat(pid)
	return err != nil || f[0] == "Z"
}

// serve asks modelserve to serve repo as name (the repository's
// suggestion when ""), with replicas (0: loaded on demand), and returns
// the job's id.
func (h *handoverServer) serve(t testing.TB, repo, name string, replicas int) string {
	t.Helper()
	var job jobs.Job
	if code := h.api.do("POST", "/api/v1/serve", map[string]any{"repo": repo, "name": name, "replicas": replicas, "context_length": 1024, "ctx_pool": 2048}, &job); code != http.StatusAccepted {
		t.Fatalf("serve %s: %d", repo, code)
	}
	return job.ID
}

// served waits for job id to end, and fails the test unless it is done.
func (h *handoverServer) served(t testing.TB, id string) {
	t.Helper()
	if last := h.api.watch(id, 3*time.Minute); last[len(last)-1].State != jobs.Done {
		t.Fatalf("job %s ended %s: %s", id, last[len(last)-1].State, last[len(last)-1].Error)
	}
}

// startServingOne is a handoverServer with the real engine serving one
// tiny model, name, with replicas (0: loaded on demand).
func startServingOne(t *testing.T, name string, replicas int) *handoverServer {
	t.Helper()
	hub := hubtest.New(t)
	repo := "acme/" + name + "-GGUF"
	tinyRepo(t, hub, repo, name+"-Q4_K_M.gguf", ggufgen.Spec{})
	h := startHandoverServer(t, hub, llamatest.Path(t))
	h.served(t, h.serve(t, repo, name, replicas))
	return h
}

// TestSIGHUPHandsThePortOverUnderLoad: sixteen clients (half streaming)
// ask three served models while modelserve gets SIGHUP, with a job
// mirroring another model at that moment. No request fails and none is
// refused a connection, every stream ends whole, the engines after are the
// ones before, the new process serves the data folder and the old one
// exits, and the job ends done in the new process without fetching its
// file twice.
func TestSIGHUPHandsThePortOverUnderLoad(t *testing.T) {
	engine := llamatest.Path(t)
	hub := hubtest.New(t)
	h := startHandoverServer(t, hub, engine)
	s := h.api
	h.serveThree(t, hub)
	// A job in flight: its download takes a few seconds. The same
	// repository served once before says what a job's whole run asks of
	// the registry (the plan reads the header there too).
	const file, size = "Slow-Q4_K_M.gguf", 6 << 20
	head, fill := ggufgen.Bytes(ggufgen.Spec{}), hubtest.Pattern(3)
	for _, repo := range []string{"acme/Slow-GGUF", "acme/Before-GGUF"} {
		hub.AddRepo(repo, hubtest.RepoOptions{})
		hub.AddFileSpec(repo, hubtest.FileSpec{Path: file, Size: size, Gen: func(off int64, p []byte) {
			fill(off, p)
			if off < int64(len(head)) {
				copy(p, head[off:])
			}
		}})
	}
	hub.ConnRate(2 << 20)
	h.served(t, h.serve(t, "acme/Before-GGUF", "", 0))
	whole := hub.BytesServed("acme/Before-GGUF", file)
	const repo = "acme/Slow-GGUF"

	ld := startClients(s.base, s.token, threeModels, loadClients)
	defer ld.end()
	slow := h.serve(t, repo, "", 0)
	testkit.WaitFor(t, time.Minute, "the slow job's download begun", func() (bool, string) {
		var j jobs.Job
		s.do("GET", "/api/v1/jobs/"+slow, nil, &j)
		st, _ := j.Step(jobs.StepMirror)
		return st.State == jobs.Running, "its mirror step is " + st.State
	})
	run := h.throughSIGHUP(t, ld)
	t.Log(run)
	// The goal is a tenth of this (BenchmarkSIGHUPUnderLoad measures it);
	// past a second, a request waited for the new process's start, which
	// takes longer, rather than be answered by the old one meanwhile.
	if run.added() > time.Second {
		t.Errorf("the handover added %s to its longest request: %s", run.added().Round(time.Millisecond), run)
	}

	var j jobs.Job
	testkit.WaitFor(t, 2*time.Minute, "the slow job done in the new process", func() (bool, string) {
		s.do("GET", "/api/v1/jobs/"+slow, nil, &j)
		return j.Ended(), "it is " + j.State
	})
	if j.State != jobs.Done {
		t.Errorf("the job in flight at the SIGHUP ended %s: %s", j.State, j.Error)
	}
	if served := hub.BytesServed(repo, file); served > whole {
		t.Errorf("the registry served %d bytes of the file to the job in flight at the SIGHUP, and %d to the same job without one: part of a step was run twice\n%s",
			served, whole, h.first.logs.String())
	}
	if !strings.Contains(h.first.logs.String(), "resuming a job") {
		t.Errorf("the new process did not resume the job\n%s", h.first.logs.String())
	}
}

// TestRequestsQueuedForAColdModelThroughSIGHUP: requests waiting in the
// old process, at the SIGHUP, for a model loaded on demand (which its
// stopped fleet will not load) are answered by it once the new process
// serves: with a 503 the OpenAI clients retry on a new connection, which
// the official Go client does, and is answered by the new process, which
// loads the model.
func TestRequestsQueuedForAColdModelThroughSIGHUP(t *testing.T) {
	h := startServingOne(t, "sleepy", 0)
	s := h.api

	// Each client keeps a connection to the old process, made before the
	// SIGHUP: what it sends next reaches the old process, not the new.
	raw := &http.Client{Transport: &http.Transport{}, Timeout: time.Minute}
	retrying := &http.Client{Transport: &http.Transport{}, Timeout: time.Minute}
	for _, c := range []*http.Client{raw, retrying} {
		req, _ := http.NewRequest("GET", s.base+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+s.token)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	oa := openai.NewClient(option.WithBaseURL(s.base+"/v1/"), option.WithAPIKey(s.token), option.WithHTTPClient(retrying))

	old := h.first.pid
	syscall.Kill(old, syscall.SIGHUP)
	testkit.WaitFor(t, time.Minute, "the old process's fleet stopped for the handover", func() (bool, string) {
		return strings.Contains(h.first.logs.String(), "the fleet stopped, its engines left running"), h.first.logs.String()
	})
	type answer struct {
		resp *http.Response
		body []byte
		err  error
	}
	rawDone := make(chan answer, 1)
	go func() {
		body, _ := json.Marshal(map[string]any{"model": "sleepy", "max_tokens": 4, "messages": []map[string]string{{"role": "user", "content": "Say hello"}}})
		req, _ := http.NewRequest("POST", s.base+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+s.token)
		resp, err := raw.Do(req)
		var b []byte
		if err == nil {
			b, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		rawDone <- answer{resp, b, err}
	}()
	oaDone := make(chan error, 1)
	var said *openai.ChatCompletion
	go func() {
		var err error
		said, err = oa.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "sleepy", MaxTokens: openai.Int(4),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello")}})
		oaDone <- err
	}()
	h.awaitTakeover(t, old)

	a := <-rawDone
	if a.err != nil {
		t.Fatalf("the request queued in the old process: %v\n%s", a.err, h.first.logs.String())
	}
	var e struct {
		Error struct{ Code, Message string }
	}
	json.Unmarshal(a.body, &e)
	if a.resp.StatusCode != http.StatusServiceUnavailable || e.Error.Code != "handing_over" || a.resp.Header.Get("x-should-retry") != "true" || !a.resp.Close {
		t.Errorf("the request queued in the old process was answered %s (x-should-retry %q, connection closed %t): %s; want 503 handing_over, to retry on a new connection",
			a.resp.Status, a.resp.Header.Get("x-should-retry"), a.resp.Close, a.body)
	}
	if err := <-oaDone; err != nil || len(said.Choices) == 0 {
		t.Errorf("the official client's request queued in the old process: %v, want it answered by the new one after a retry\n%s", err, h.first.logs.String())
	}
}

// TestAnEvalRunThroughSIGHUP: an eval run under way at the SIGHUP ends in
// the old process, before the new one starts, failed and saying a handover
// interrupted it after how many cases, with the results it had; the new
// process runs the suite again when asked.
func TestAnEvalRunThroughSIGHUP(t *testing.T) {
	h := startServingOne(t, "chatty", 1)
	s := h.api
	var cases []string
	for i := 1; i <= 100; i++ {
		cases = append(cases, fmt.Sprintf(`{"name": "long %d", "prompt": "Tell a long story, number %d.", "max_tokens": 256, "expect": {"regex": "\\S"}}`, i, i))
	}
	req, _ := http.NewRequest(http.MethodPut, s.base+"/api/v1/catalog/chatty/evals", strings.NewReader(`{"cases": [`+strings.Join(cases, ",")+`]}`))
	req.Header.Set("Authorization", "Bearer "+s.token)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT the suite: %v %v", resp, err)
	}
	var run evals.Run
	if code := s.do("POST", "/api/v1/catalog/chatty/evals/run", nil, &run); code != http.StatusAccepted {
		t.Fatalf("POST the run: %d", code)
	}
	path := fmt.Sprintf("/api/v1/evals/runs/%d", run.ID)
	testkit.WaitFor(t, time.Minute, "the run's first result", func() (bool, string) {
		s.do("GET", path, nil, &run)
		return len(run.Results) > 0, fmt.Sprint(len(run.Results), " results")
	})

	syscall.Kill(h.first.pid, syscall.SIGHUP)
	h.awaitTakeover(t, h.first.pid)
	var got evals.Run
	s.do("GET", path, nil, &got)
	if got.State != evals.StateFailed || !strings.HasPrefix(got.Error, "modelserve handed its port to a new process while the run was running, after ") ||
		len(got.Results) == 0 || len(got.Results) >= 100 || !strings.Contains(got.Error, fmt.Sprintf("after %d of 100 cases", len(got.Results))) {
		t.Errorf("the run under way at the SIGHUP: %s, %d results, %q; want failed saying the handover interrupted it, with the results it had\n%s",
			got.State, len(got.Results), got.Error, h.first.logs.String())
	}
	var again evals.Run
	if code := s.do("POST", "/api/v1/catalog/chatty/evals/run", nil, &again); code != http.StatusAccepted || again.State != evals.StateRunning {
		t.Errorf("running the suite again in the new process: %d %+v", code, again)
	}
}

// TestUpgradeOfABrokenBinaryLeavesTheOldServing: --upgrade with a binary
// on disk that cannot start says why and leaves the old process serving;
// with the real binary back, --upgrade hands the port over.
func TestUpgradeOfABrokenBinaryLeavesTheOldServing(t *testing.T) {
	hub := hubtest.New(t)
	h := startHandoverServer(t, hub, "")
	// The client runs from a copy: the binary on disk is about to break.
	upgrader := filepath.Join(t.TempDir(), "modelserve")
	copyFile(t, h.bin, upgrader)
	upgrade := func() (string, error) {
		cmd := exec.Command(upgrader, "serve", "--upgrade", "--data", h.data)
		cmd.Env = h.env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	broken := filepath.Join(filepath.Dir(h.bin), "broken")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\necho this build is broken >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	real := h.bin + ".real"
	if err := os.Rename(h.bin, real); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(broken, h.bin); err != nil {
		t.Fatal(err)
	}
	out, err := upgrade()
	if err == nil || !strings.Contains(out, "exited before it served") {
		t.Errorf("--upgrade to a broken binary: %v, want a failure saying the new one exited before it served:\n%s", err, out)
	}
	if pid := h.servingPID(); pid != h.first.pid {
		t.Errorf("after the failed upgrade the pid file names %d, want the old %d", pid, h.first.pid)
	}
	if code := h.api.do("GET", "/healthz", nil, nil); code != http.StatusOK {
		t.Errorf("after the failed upgrade /healthz answers %d", code)
	}

	if err := os.Rename(real, h.bin); err != nil {
		t.Fatal(err)
	}
	out, err = upgrade()
	if err != nil || !strings.Contains(out, "the new modelserve (pid ") {
		t.Fatalf("--upgrade: %v\n%s\n%s", err, out, h.first.logs.String())
	}
	h.awaitTakeover(t, h.first.pid)
	if code := h.api.do("GET", "/healthz", nil, nil); code != http.StatusOK {
		t.Errorf("after the upgrade /healthz answers %d", code)
	}
}

// TestSystemdSocketActivation: a socket opened by systemd and passed as fd
// 3 with LISTEN_FDS and LISTEN_PID is the one modelserve serves on.
func TestSystemdSocketActivation(t *testing.T) {
	dir := t.TempDir()
	bin := buildModelserve(t, dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	defer f.Close()
	// systemd sets LISTEN_PID after its fork, to the pid that execs the
	// service: the shell's, which exec keeps.
	cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" "$@"`, bin, "serve", "--addr", "127.0.0.1:1", "--data", filepath.Join(dir, "data"))
	cmd.Env = binaryEnv(dir)
	cmd.ExtraFiles = []*os.File{f}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var said []string
	for line := range lines {
		said = append(said, line)
		if m := listeningAt.FindStringSubmatch(line); m != nil {
			if m[1] != ln.Addr().String() || !strings.Contains(line, `socket="opened by systemd"`) {
				t.Errorf("modelserve listens as %q, want on systemd's socket %s", line, ln.Addr())
			}
			resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /healthz on systemd's socket: %v %v", resp, err)
			}
			resp.Body.Close()
			return
		}
	}
	t.Fatalf("modelserve exited before listening:\n%s", strings.Join(said, "\n"))
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

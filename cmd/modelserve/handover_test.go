package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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

func startHandoverServer(t *testing.T, hub *hubtest.Server, engine string) *handoverServer {
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
func (h *handoverServer) stopServing(t *testing.T) {
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
func (h *handoverServer) awaitTakeover(t *testing.T, old int) int {
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

// clients are asking a model in a loop, half of them streaming, each
// request's outcome counted.
type clients struct {
	mu                  sync.Mutex
	ok, failed, refused int
	cut                 int // streams that ended without [DONE]
	firstErrs           []string
	worst               time.Duration
	before              []time.Duration // latencies before mark
	marked              bool
	stop                chan struct{}
	wg                  sync.WaitGroup
}

func startClients(base, token, model string, n int) *clients {
	l := &clients{stop: make(chan struct{})}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	for i := range n {
		stream := i%2 == 0
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				l.one(client, base, token, model, stream)
			}
		}()
	}
	return l
}

func (l *clients) one(client *http.Client, base, token, model string, stream bool) {
	body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 8, "stream": stream,
		"messages": []map[string]string{{"role": "user", "content": "Say hello"}}})
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	began := time.Now()
	resp, err := client.Do(req)
	var b []byte
	if err == nil {
		b, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	took := time.Since(began)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil && errors.Is(err, syscall.ECONNREFUSED):
		l.refused++
		l.note(err.Error())
	case err != nil:
		l.failed++
		l.note(err.Error())
	case resp.StatusCode != http.StatusOK:
		l.failed++
		l.note(fmt.Sprintf("%s: %s", resp.Status, b))
	case stream && !bytes.Contains(b, []byte("data: [DONE]")):
		l.cut++
		l.note("a stream ended without [DONE]: " + string(b))
	default:
		l.ok++
	}
	if l.marked {
		l.worst = max(l.worst, took)
	} else {
		l.before = append(l.before, took)
	}
}

func (l *clients) note(s string) {
	if len(l.firstErrs) < 5 {
		l.firstErrs = append(l.firstErrs, s)
	}
}

// mark starts counting the worst latency: what came before is the usual.
func (l *clients) mark() {
	l.mu.Lock()
	l.marked = true
	l.mu.Unlock()
}

func (l *clients) end() {
	close(l.stop)
	l.wg.Wait()
}

// usual is the median latency before mark.
func (l *clients) usual() time.Duration {
	if len(l.before) == 0 {
		return 0
	}
	s := slices.Clone(l.before)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestSIGHUPHandsThePortOverUnderLoad: sixteen clients (half streaming)
// ask a served model while modelserve gets SIGHUP, with a job mirroring
// another model at that moment. No request fails and none is refused a
// connection, every stream ends whole, the new process serves the data
// folder and the old one exits, and the job ends done in the new process
// without fetching its file twice.
func TestSIGHUPHandsThePortOverUnderLoad(t *testing.T) {
	engine := llamatest.Path(t)
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Chatty-GGUF", "Chatty-Q4_K_M.gguf", ggufgen.Spec{})
	h := startHandoverServer(t, hub, engine)
	s := h.api
	serveModel := func(repo string, replicas int) string {
		var job jobs.Job
		if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": repo, "replicas": replicas, "context_length": 1024, "ctx_pool": 2048}, &job); code != http.StatusAccepted {
			t.Fatalf("serve %s: %d", repo, code)
		}
		return job.ID
	}
	if last := s.watch(serveModel("acme/Chatty-GGUF", 1), 3*time.Minute); last[len(last)-1].State != jobs.Done {
		t.Fatalf("the job ended %s: %s", last[len(last)-1].State, last[len(last)-1].Error)
	}

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
	if last := s.watch(serveModel("acme/Before-GGUF", 0), 3*time.Minute); last[len(last)-1].State != jobs.Done {
		t.Fatalf("the job ended %s: %s", last[len(last)-1].State, last[len(last)-1].Error)
	}
	whole := hub.BytesServed("acme/Before-GGUF", file)
	const repo = "acme/Slow-GGUF"

	ld := startClients(s.base, s.token, "chatty", 16)
	time.Sleep(2 * time.Second) // the usual latency
	slow := serveModel(repo, 0)
	testkit.WaitFor(t, time.Minute, "the slow job's download begun", func() (bool, string) {
		var j jobs.Job
		s.do("GET", "/api/v1/jobs/"+slow, nil, &j)
		st, _ := j.Step(jobs.StepMirror)
		return st.State == jobs.Running, "its mirror step is " + st.State
	})
	engines := h.enginePIDs()
	if len(engines) == 0 {
		t.Fatal("no engine runs before the SIGHUP: the test proves nothing")
	}
	ld.mark()
	old := h.first.pid
	syscall.Kill(old, syscall.SIGHUP)
	pid := h.awaitTakeover(t, old)
	time.Sleep(time.Second) // the new process answering alone
	ld.end()

	t.Logf("%d requests answered through the handover; the usual took %s, the longest since the SIGHUP %s (%s added)",
		ld.ok, ld.usual().Round(time.Millisecond), ld.worst.Round(time.Millisecond), (ld.worst - ld.usual()).Round(time.Millisecond))
	if ld.failed+ld.refused+ld.cut > 0 || ld.ok == 0 {
		t.Errorf("through the SIGHUP: %d answered, %d failed, %d refused a connection, %d streams cut; first: %q\n%s",
			ld.ok, ld.failed, ld.refused, ld.cut, ld.firstErrs, h.first.logs.String())
	}
	// The new process adopted the engines: none was loaded again.
	if after := h.enginePIDs(); !maps.Equal(after, engines) {
		t.Errorf("the engines before the SIGHUP were %v, after it %v: the new process loaded its own", engines, after)
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
		t.Errorf("the new process (pid %d) did not resume the job\n%s", pid, h.first.logs.String())
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

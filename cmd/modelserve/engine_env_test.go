package main

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/llamatest"
	"modelserve/internal/testkit"
	"modelserve/jobs"
)

// TestAnAPITokenCannotReachTheEngineProcess holds what a request may set of
// the engine's process to a short list of named settings: before, any
// GGML_* or LLAMA_ARG_* variable reached it, which loaded a library of the
// caller's choosing (GGML_BACKEND_PATH), wrote a file anywhere
// (LLAMA_ARG_LOG_FILE) or turned on the engine's shell tool
// (LLAMA_ARG_TOOLS). It also holds that the engine's key is not in its
// arguments, which every user of the machine can read, and that no answer
// names a path on this machine.
func TestAnAPITokenCannotReachTheEngineProcess(t *testing.T) {
	engine := llamatest.Path(t)
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Chatty-GGUF", "Chatty-Q4_K_M.gguf", ggufgen.Spec{})
	data := t.TempDir()
	cfg := config{Addr: "127.0.0.1:0", Data: data, HFEndpoint: hub.URL(), LlamaServer: engine}
	s := startAPI(t, cfg)

	for _, env := range []map[string]string{
		{"GGML_BACKEND_PATH": filepath.Join(data, "mirror", "evil.so")},
		{"LLAMA_ARG_LOG_FILE": "/etc/cron.d/modelserve"},
		{"LLAMA_ARG_TOOLS": "all"},
		{"LD_PRELOAD": "/tmp/x.so"},
		{"OMP_NUM_THREADS": "2; touch /tmp/x"},
	} {
		var refusal struct{ Error string }
		code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Chatty-GGUF", "env": env}, &refusal)
		if code != http.StatusBadRequest || !strings.Contains(refusal.Error, "engine setting") && !strings.Contains(refusal.Error, "takes") {
			t.Errorf("serve with env %v: %d %q, want 400 saying which settings a request may set", env, code, refusal.Error)
		}
	}
	var list struct{ Total int }
	if s.do("GET", "/api/v1/jobs", nil, &list); list.Total != 0 {
		t.Errorf("%d jobs after refused requests, want none", list.Total)
	}

	// A setting on the list, with a value it takes, reaches the engine.
	job := serveWithThreads(t, s)
	pid := enginePID(t, s)
	args, env := processOf(t, pid)
	if strings.Contains(args, "--api-key") {
		t.Errorf("the engine's arguments carry its key, for any local user to read: %s", args)
	}
	if !hasVar(env, "OMP_NUM_THREADS=2") || !hasPrefixVar(env, "LLAMA_API_KEY=") {
		t.Errorf("the engine's environment lacks OMP_NUM_THREADS=2 or its key (LLAMA_API_KEY)")
	}
	for _, path := range []string{"/api/v1/catalog", "/api/v1/catalog/chatty", "/api/v1/replicas", "/api/v1/mirror", "/api/v1/jobs/" + job.ID} {
		if body := s.get(path); strings.Contains(body, data) {
			t.Errorf("GET %s names a path on this machine (%s): %s", path, data, body)
		}
	}

	// An entry stored before the settings were named, with one the list
	// does not take: the fleet leaves it out of the engine's environment.
	s.stop()
	db := testkit.OpenDBFile(t, filepath.Join(data, "modelserve.db"))
	if _, err := db.Exec(`UPDATE models SET spec = json_set(spec, '$.profiles[0].env', json('{"LLAMA_ARG_TOOLS":"all","OMP_NUM_THREADS":"2"}')) WHERE name = 'chatty'`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s = startAPI(t, cfg)
	var again int
	testkit.WaitFor(t, 2*time.Minute, "chatty's replica started again", func() (bool, string) {
		again = enginePIDIfReady(s)
		return again != 0, "no replica of chatty ready"
	})
	if _, env := processOf(t, again); hasPrefixVar(env, "LLAMA_ARG_TOOLS=") || !hasVar(env, "OMP_NUM_THREADS=2") {
		t.Errorf("a stored LLAMA_ARG_TOOLS reached the engine, or the setting beside it did not")
	}
}

// TestAFileThatFailsItsCheckLeavesTheMirror serves a "GGUF" file that is
// not one (a shared library, say): the job fails at the check step, and the
// file is no longer on the mirror, where a path could name it.
func TestAFileThatFailsItsCheckLeavesTheMirror(t *testing.T) {
	hub := hubtest.New(t)
	hub.AddRepo("acme/Evil-GGUF", hubtest.RepoOptions{})
	hub.AddFile("acme/Evil-GGUF", "Evil-Q4_K_M.gguf", append([]byte("\x7fELF"), bytes.Repeat([]byte{0}, 4096)...))
	data := t.TempDir()
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: data, HFEndpoint: hub.URL()})
	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Evil-GGUF", "replicas": 0, "context_length": 1024}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d", code)
	}
	seen := s.watch(job.ID, time.Minute)
	last := seen[len(seen)-1]
	if check, _ := last.Step(jobs.StepCheck); last.State != jobs.Failed || check.State != jobs.Failed {
		t.Fatalf("job ended %s with the check %+v, want it failed at the check", last.State, check)
	}
	var found []string
	filepath.WalkDir(filepath.Join(data, "mirror"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			found = append(found, strings.TrimPrefix(p, data))
		}
		return nil
	})
	if len(found) > 0 {
		t.Errorf("files left on the mirror after their check failed: %v", found)
	}
	var mirrored struct{ Files []struct{ Path string } }
	if s.do("GET", "/api/v1/mirror", nil, &mirrored); len(mirrored.Files) != 0 {
		t.Errorf("the mirror still lists %+v", mirrored.Files)
	}
}

func (s *apiServer) get(path string) string {
	s.t.Helper()
	req, _ := http.NewRequest("GET", s.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return b.String()
}

// enginePIDIfReady is the pid of the one ready replica, or 0.
// serveWithThreads serves acme/Chatty-GGUF with one replica whose profile
// sets OMP_NUM_THREADS=2, waits for its job to end done, and returns it.
func serveWithThreads(t *testing.T, s *apiServer) jobs.Job {
	t.Helper()
	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Chatty-GGUF", "replicas": 1,
		"context_length": 1024, "ctx_pool": 2048, "env": map[string]string{"OMP_NUM_THREADS": "2"}}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d", code)
	}
	if last := s.watch(job.ID, 3*time.Minute); last[len(last)-1].State != jobs.Done {
		t.Fatalf("job ended %s: %s", last[len(last)-1].State, last[len(last)-1].Error)
	}
	return job
}

func enginePIDIfReady(s *apiServer) int {
	var reps struct {
		Replicas []struct {
			State string
			PID   int `json:"pid"`
		}
	}
	if s.do("GET", "/api/v1/replicas", nil, &reps) != 200 || len(reps.Replicas) != 1 || reps.Replicas[0].State != "ready" {
		return 0
	}
	return reps.Replicas[0].PID
}

func enginePID(t *testing.T, s *apiServer) int {
	t.Helper()
	pid := enginePIDIfReady(s)
	if pid == 0 {
		t.Fatal("no ready replica with a pid")
	}
	return pid
}

// processOf is a process's arguments, as ps shows them to anyone, and its
// environment, which only its own user can read.
func processOf(t *testing.T, pid int) (args string, env []string) {
	t.Helper()
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		t.Fatal(err)
	}
	environ, err := os.ReadFile(filepath.Join(dir, "environ"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(cmdline), "\x00", " "), strings.Split(string(environ), "\x00")
}

func hasVar(env []string, kv string) bool {
	for _, e := range env {
		if e == kv {
			return true
		}
	}
	return false
}

func hasPrefixVar(env []string, prefix string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, prefix) {
			return true
		}
	}
	return false
}

// TestAnEngineSeesNoneOfTheServersSecrets starts a real engine from a
// modelserve whose environment holds the registry's token, the session
// secret, the metrics token and another token: the engine's environment,
// which anything running as its user can read (/proc/<pid>/environ),
// holds none of them, and still holds what it needs to run (its PATH,
// locale, time zone and cards), its key, the setting its profile carries
// and the one the operator gave every engine.
func TestAnEngineSeesNoneOfTheServersSecrets(t *testing.T) {
	secrets := map[string]string{
		"HF_TOKEN":                  "hf_sEcReT0001",
		"MODELSERVE_SESSION_SECRET": "session-sEcReT-0002-0123456789abcdef",
		"MODELSERVE_METRICS_TOKEN":  "metrics-sEcReT-0003",
		"SOME_OTHER_TOKEN":          "other-sEcReT-0004",
		"LLAMA_ARG_HF_TOKEN":        "hf_sEcReT0005",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	needed := []string{"LANG=C.UTF-8", "TZ=Europe/Berlin", "CUDA_VISIBLE_DEVICES=0", "GGML_CUDA_NO_PINNED=1"}
	for _, kv := range needed {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	engine := llamatest.Path(t)
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Chatty-GGUF", "Chatty-Q4_K_M.gguf", ggufgen.Spec{})
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: t.TempDir(), HFEndpoint: hub.URL(), LlamaServer: engine})
	serveWithThreads(t, s)
	_, env := processOf(t, enginePID(t, s))
	joined := strings.Join(env, "\n")
	for k, v := range secrets {
		if hasPrefixVar(env, k+"=") || strings.Contains(joined, v) {
			t.Errorf("the engine's environment holds modelserve's %s", k)
		}
	}
	if hasPrefixVar(env, "MODELSERVE_") {
		t.Errorf("the engine's environment holds a MODELSERVE_ variable:\n%s", joined)
	}
	for _, kv := range append(needed, "PATH="+os.Getenv("PATH"), "OMP_NUM_THREADS=2") {
		if !hasVar(env, kv) {
			t.Errorf("the engine's environment lacks %s:\n%s", kv, joined)
		}
	}
	if !hasPrefixVar(env, "LLAMA_API_KEY=") {
		t.Errorf("the engine's environment lacks its key (LLAMA_API_KEY)")
	}
}

package main

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/llamatest"
	"modelserve/internal/testkit"
	"modelserve/jobs"
)

// TestKilledModelserveLeavesItsEnginesToTheNext: modelserve is killed
// with SIGKILL while serving; its engine keeps running, and a plain start
// on the same data folder adopts it (the same pid), and answers through
// it with no reload.
func TestKilledModelserveLeavesItsEnginesToTheNext(t *testing.T) {
	engine := llamatest.Path(t)
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Chatty-GGUF", "Chatty-Q4_K_M.gguf", ggufgen.Spec{})
	b := newBinaryFolder(t, hub, engine, "adopter")
	run := func() *killable { return b.start(t) }
	first := run()
	s := &apiServer{t: t, base: first.base, token: b.token}
	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Chatty-GGUF", "replicas": 1, "context_length": 1024, "ctx_pool": 1024}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d", code)
	}
	if last := s.watch(job.ID, 3*time.Minute); last[len(last)-1].State != jobs.Done {
		t.Fatalf("job ended %s: %s", last[len(last)-1].State, last[len(last)-1].Error)
	}
	pid := enginePIDIfReady(s)
	if pid == 0 {
		t.Fatal("no replica of chatty ready after its job")
	}
	// The engine is stopped whatever happens below: the second modelserve
	// stops it with SIGTERM (binaryEnv asks it to), and should that not
	// come, here.
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	first.kill()
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the engine (pid %d) died with modelserve: %v", pid, err)
	}

	start := time.Now()
	second := run()
	s.base = second.base
	var got int
	testkit.WaitFor(t, 30*time.Second, "chatty's engine adopted", func() (bool, string) {
		got = enginePIDIfReady(s)
		return got != 0, "no replica of chatty ready"
	})
	var answer struct {
		Choices []struct{ Message struct{ Content string } }
	}
	code := s.do("POST", "/v1/chat/completions", map[string]any{"model": "chatty", "max_tokens": 4,
		"messages": []map[string]string{{"role": "user", "content": "Say hello."}}}, &answer)
	t.Logf("from a plain start to the first answer of the adopted engine: %s (goal: under 1 s, the binary's own start included)", time.Since(start))
	if code != http.StatusOK || len(answer.Choices) == 0 {
		t.Fatalf("chatty answered %d after the restart: %+v\n%s", code, answer, second.logs.String())
	}
	if got != pid {
		t.Errorf("chatty is served by pid %d after the restart, want its engine left running, pid %d", got, pid)
	}
	if !strings.Contains(second.logs.String(), "adopted an engine left running") {
		t.Errorf("the second modelserve does not say it adopted the engine:\n%s", second.logs.String())
	}
}

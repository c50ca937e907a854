// Package llamatest gives tests llama.cpp's real llama-server.
//
// modelserve starts llama-server as replicas: it passes its flags, waits for
// /health, and sends chat and embedding requests. A fake that only pretended
// would let a wrong flag, a refused model or a misread answer pass every
// test, so the tests run the real engine: the build that
// internal/engine/install-llama-server.sh unpacks into the cache folder
// (`make test` runs it first). Tests pass Path(t) as --llama-server, or use
// Start to run one engine on a free loopback port.
//
// Under `make test` (MODELSERVE_REQUIRE_ENGINE=1) a missing engine fails the
// test; a bare `go test` skips it and says how to install one.
package llamatest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"modelserve/internal/engine"
	"modelserve/internal/testlog"
)

// Threads keep an engine to one thread. With more threads than idle cores
// llama.cpp spins, and on a busy two-core machine two threads made the tiny
// model tens of times slower than one.
var Threads = []string{"--threads", "1"}

// Path is the absolute path of the installed llama-server. When it is
// missing the test fails under `make test` and is skipped otherwise.
func Path(t testing.TB) string {
	t.Helper()
	p, err := engine.Installed()
	if err == nil {
		_, err = os.Stat(p)
	}
	if err != nil {
		const how = "llama-server is not installed: run internal/engine/install-llama-server.sh (make test does)"
		if os.Getenv("MODELSERVE_REQUIRE_ENGINE") != "" {
			t.Fatalf("%s: %v", how, err)
		}
		t.Skipf("%s: %v", how, err)
	}
	return p
}

// SlowPath is an engine that waits delay before it becomes llama-server: a
// slow load, or with a long delay one that never loads. It is a shell script
// that sleeps, then execs the real engine, so the process modelserve started
// is the one that serves. Only the wait is made up: a model large enough to
// load slowly for real would cost the tests its size on disk.
func SlowPath(t testing.TB, delay time.Duration) string {
	t.Helper()
	real := Path(t)
	p := filepath.Join(t.TempDir(), "llama-server")
	script := fmt.Sprintf("#!/bin/sh\nsleep %.3f\nexec %q \"$@\"\n", delay.Seconds(), real)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// FreePort is a loopback port nothing listens on at the moment of asking.
// Another process may take it before the engine binds it; on a test machine
// that is rare enough to accept.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Command is the engine's command with args, in its own process group and
// killed should the test binary die first, so that no engine outlives the
// tests. The caller starts it and must end it (see Stop).
func Command(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(Path(t), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Stop kills cmd's process group and waits for it. It is safe to call on a
// process that has already exited or been waited for.
func Stop(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	if cmd.ProcessState == nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}
}

// Start runs the engine with args plus one thread, --host 127.0.0.1 and
// --port N on a free port, and returns its base URL ("http://127.0.0.1:N")
// and command. It does not wait for the model to load (see WaitReady). At
// cleanup the engine's process group is killed; if the test failed, the
// engine's output is logged.
func Start(t testing.TB, args ...string) (baseURL string, cmd *exec.Cmd) {
	t.Helper()
	port := FreePort(t)
	args = append(append(args, Threads...), "--host", "127.0.0.1", "--port", strconv.Itoa(port))
	cmd = Command(t, args...)
	out := &testlog.Buffer{}
	cmd.Stdout = out
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting llama-server: %v", err)
	}
	t.Cleanup(func() {
		Stop(cmd)
		if t.Failed() {
			t.Logf("llama-server output:\n%s", out.String())
		}
	})
	return "http://127.0.0.1:" + strconv.Itoa(port), cmd
}

// WaitReady polls baseURL/health until it answers 200 or timeout passes,
// and fails the test then. A tiny model is ready in well under a second.
func WaitReady(t testing.TB, baseURL string, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	last := "no answer"
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/health", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			t.Fatalf("llama-server at %s was not ready within %s: last answer %s", baseURL, timeout, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Package llamatest runs a test engine in place of llama.cpp's llama-server.
//
// modelserve starts llama-server as replicas: it passes its flags, waits for
// /health, and sends chat and embedding requests. Nothing here can download
// llama-server, and a fake that only pretended to load models would let a
// wrong flag, a refused model or a misread answer pass every test. The
// executable in this directory, llama-server, keeps llama-server's command
// line and HTTP contract strictly and has real llama.cpp inside (through the
// npm package node-llama-cpp), so the tiny models internal/ggufgen writes
// really load, generate and embed. Tests pass Path(t) as --llama-server, or
// use Start to run one engine on a free loopback port.
package llamatest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// skipReason is why a test cannot run the engine on this machine.
const skipReason = "node-llama-cpp is not installed: make test installs it (npm ci --prefix internal/llamatest)"

// dir is this package's directory, found from this source file so that the
// tests of any package, whatever their working directory, find the engine.
func dir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("llamatest cannot tell where its source file is")
	}
	return filepath.Dir(file), nil
}

// Path is the absolute path of the llama-server test engine. It skips the
// test when node or the engine's npm packages are missing, since then no
// engine can run.
func Path(t testing.TB) string {
	t.Helper()
	d, err := dir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip(skipReason + " (node is not on PATH)")
	}
	if _, err := os.Stat(filepath.Join(d, "node_modules", "node-llama-cpp", "package.json")); err != nil {
		t.Skip(skipReason)
	}
	exe := filepath.Join(d, "llama-server")
	if _, err := os.Stat(exe); err != nil {
		t.Fatalf("the test engine is missing: %v", err)
	}
	return exe
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
	// The group, not only the process: the engine is node, which may have
	// children of its own.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if cmd.ProcessState == nil {
		_ = cmd.Wait()
	}
}

// Start runs the engine with args plus --host 127.0.0.1 --port N on a free
// port and returns its base URL ("http://127.0.0.1:N") and command. It does
// not wait for the model to load (see WaitReady). At cleanup the engine's
// process group is killed; if the test failed, the engine's stderr is logged.
func Start(t testing.TB, args ...string) (baseURL string, cmd *exec.Cmd) {
	t.Helper()
	baseURL, cmd, _ = start(t, nil, args...)
	return baseURL, cmd
}

// start is Start with extra environment (KEY=value) for the engine, that
// also hands back the engine's output, for the tests here that read it.
func start(t testing.TB, env []string, args ...string) (baseURL string, cmd *exec.Cmd, output *syncBuffer) {
	t.Helper()
	port := FreePort(t)
	cmd = Command(t, append(args, "--host", "127.0.0.1", "--port", strconv.Itoa(port))...)
	cmd.Env = append(cmd.Environ(), env...)
	stderr := &syncBuffer{}
	cmd.Stdout = stderr
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the test engine: %v", err)
	}
	t.Cleanup(func() {
		Stop(cmd)
		if t.Failed() {
			t.Logf("test engine output:\n%s", stderr.String())
		}
	})
	return "http://127.0.0.1:" + strconv.Itoa(port), cmd, stderr
}

// WaitReady polls baseURL/health until it answers 200 or timeout passes,
// and fails the test then. A tiny model is ready in a second or two.
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
			t.Fatalf("the test engine at %s was not ready within %s: last answer %s", baseURL, timeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// syncBuffer collects a process's output while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

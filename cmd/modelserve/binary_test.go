package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"modelserve/internal/hubtest"
)

// buildModelserve builds modelserve's own executable into dir, to be run as
// an operator runs it.
func buildModelserve(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "modelserve")
	if out, err := exec.Command("go", "build", "-o", bin, "modelserve/cmd/modelserve").CombinedOutput(); err != nil {
		t.Fatalf("building modelserve: %v\n%s", err, out)
	}
	return bin
}

// binaryEnv is the environment the executable runs in: this one, less
// what would point it at the operator's registry, token, settings or
// trace backend, with a Hugging Face home of its own under dir.
func binaryEnv(dir string) []string {
	// The engines end with the modelserve a test stops: none outlives
	// the test. A kill leaves them running still, for the next to adopt.
	env := []string{"HF_HOME=" + filepath.Join(dir, "hf-home"), "MODELSERVE_STOP_ENGINES_ON_EXIT=true"}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "HF_") && !strings.HasPrefix(k, "HUGGING_FACE") && !strings.HasPrefix(k, "MODELSERVE_") &&
			!strings.HasPrefix(k, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}

// binaryFolder is modelserve's binary over a data folder of its own, with
// an API token made as an operator makes one: start serves it as an
// operator starts it, against hub and engine.
type binaryFolder struct {
	bin, data, token string
	env              []string
	hub              *hubtest.Server
	engine           string
}

func newBinaryFolder(t testing.TB, hub *hubtest.Server, engine, tokenName string) *binaryFolder {
	t.Helper()
	dir := t.TempDir()
	b := &binaryFolder{bin: buildModelserve(t, dir), env: binaryEnv(dir), hub: hub, engine: engine}
	b.data = mustMakeData(t, filepath.Join(dir, "data"))
	tc := exec.Command(b.bin, "token", "create", "--data", b.data, tokenName)
	tc.Env = b.env
	out, err := tc.Output()
	if err != nil {
		t.Fatalf("modelserve token create: %v", err)
	}
	b.token = strings.TrimSpace(string(out))
	return b
}

// start serves the data folder on a port of its own.
func (b *binaryFolder) start(t testing.TB) *killable {
	t.Helper()
	return startKillable(t, b.bin, b.env, "serve", "--addr", "127.0.0.1:0", "--data", b.data,
		"--hf-endpoint", b.hub.URL(), "--llama-server", b.engine)
}

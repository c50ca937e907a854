package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildModelserve builds modelserve's own executable into dir, to be run as
// an operator runs it.
func buildModelserve(t *testing.T, dir string) string {
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

package vllmtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Entrypoint is a program that plays the vLLM image's entrypoint on hw:
// the double (./vllm), built into the test's folder (the build cache
// makes every build after the first quick), behind a script that says
// which cards it has.
func Entrypoint(t testing.TB, hw Hardware) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "vllm")
	if out, err := exec.Command("go", "build", "-o", bin, "modelserve/internal/vllmtest/vllm").CombinedOutput(); err != nil {
		t.Fatalf("building the vLLM double: %v\n%s", err, out)
	}
	script := filepath.Join(dir, "vllm-entrypoint")
	body := fmt.Sprintf("#!/bin/sh\nMODELSERVE_VLLMTEST_CARDS=%d MODELSERVE_VLLMTEST_CARD_BYTES=%d exec %q \"$@\"\n", hw.Cards, hw.CardBytes, bin)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

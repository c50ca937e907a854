package gguf

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"modelserve/internal/ggufgen"
)

// shapesDir holds the shape-only files of real models, written once for all
// the tests: each declares gigabytes of weights but takes a few megabytes.
var shapesDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gguf-shapes-")
	if err != nil {
		panic(err)
	}
	shapesDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	shapesMu sync.Mutex
	shapes   = map[string]Header{}
)

// mustShape is the header of one of ggufgen's real-model shapes, read once.
func mustShape(t testing.TB, name string) Header {
	t.Helper()
	specs := map[string]func() ggufgen.Spec{
		"Llama-3.1-8B":  ggufgen.Llama8B,
		"Llama-3.1-70B": ggufgen.Llama70B,
		"Qwen2.5-7B":    ggufgen.Qwen7B,
		"Mistral-7B":    ggufgen.Mistral7B,
	}
	shapesMu.Lock()
	defer shapesMu.Unlock()
	if h, ok := shapes[name]; ok {
		return h
	}
	spec, ok := specs[name]
	if !ok {
		t.Fatalf("no shape %s", name)
	}
	path := filepath.Join(shapesDir, name+".gguf")
	if err := ggufgen.WriteFile(path, spec()); err != nil {
		t.Fatal(err)
	}
	h, err := Read(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	shapes[name] = h
	return h
}

// mustTiny writes s and reads its header back.
func mustTiny(t testing.TB, s ggufgen.Spec) (Header, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "model.gguf")
	if err := ggufgen.WriteFile(path, s); err != nil {
		t.Fatal(err)
	}
	h, err := Read(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return h, path
}

const (
	kib = int64(1) << 10
	gib = int64(1) << 30
)

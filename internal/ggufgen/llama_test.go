package ggufgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// probeResult is what internal/llamatest/probe.mjs prints.
type probeResult struct {
	TrainContextSize    int     `json:"trainContextSize"`
	EmbeddingVectorSize int     `json:"embeddingVectorSize"`
	EngineMs            int     `json:"engineMs"`
	LoadMs              int     `json:"loadMs"`
	PromptTokens        int     `json:"promptTokens"`
	Tokens              int     `json:"tokens"`
	Text                string  `json:"text"`
	TokensPerSecond     float64 `json:"tokensPerSecond"`
	VectorLength        int     `json:"vectorLength"`
	Finite              bool    `json:"finite"`
}

// probe runs probe.mjs on model in real llama.cpp. It skips the test when
// node or node-llama-cpp is missing, and returns llama.cpp's error text when
// the model does not load.
func probe(t *testing.T, model string, args ...string) (probeResult, string, error) {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "llamatest"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "node-llama-cpp", "package.json")); err != nil {
		t.Skip("node-llama-cpp is not installed in internal/llamatest: `make test` installs it (npm ci --prefix internal/llamatest)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH: install Node.js 20 or later to run llama.cpp in tests")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{filepath.Join(dir, "probe.mjs"), model, "--threads", "1"}, args...)...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == 1 {
			return probeResult{}, stderr.String(), err
		}
		t.Fatalf("probe.mjs failed: %v\n%s", err, stderr.String())
	}
	var res probeResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("probe.mjs printed %q: %v", stdout.String(), err)
	}
	return res, stderr.String(), nil
}

func TestLlamaCppGenerates(t *testing.T) {
	tests := []struct {
		name  string
		spec  Spec
		split int
	}{
		{name: "tiny f32", spec: Spec{ContextLength: 2048}},
		{name: "tiny f16", spec: Spec{TensorType: F16}},
		{name: "own key length", spec: Spec{KeyLength: 32, ValueLength: 32}},
		{name: "mixture of experts", spec: Spec{ExpertCount: 4, ExpertUsedCount: 2, FeedForwardLength: 64}},
		{name: "qwen2", spec: Spec{Architecture: "qwen2"}},
		{name: "first shard of three", spec: Spec{}, split: 3},
		{name: "padded to 64 MiB", spec: Spec{PadTo: 64 << 20}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "model.gguf")
			if tc.split > 0 {
				paths, err := WriteSplit(t.TempDir(), "model", tc.spec, tc.split)
				if err != nil {
					t.Fatal(err)
				}
				path = paths[0]
			} else if err := WriteFile(path, tc.spec); err != nil {
				t.Fatal(err)
			}
			res, stderr, err := probe(t, path, "--tokens", "16", "--prompt", "the world")
			if err != nil {
				t.Fatalf("llama.cpp did not load it: %v\n%s", err, stderr)
			}
			s := tc.spec.withDefaults()
			if res.TrainContextSize != int(s.ContextLength) || res.EmbeddingVectorSize != int(s.EmbeddingLength) {
				t.Errorf("llama.cpp read a context of %d and %d wide, want %d and %d",
					res.TrainContextSize, res.EmbeddingVectorSize, s.ContextLength, s.EmbeddingLength)
			}
			// "the world" is <s> ▁the ▁world: llama.cpp's tokenizer reaches
			// the words through their prefixes rather than falling back to
			// bytes.
			if res.PromptTokens != 3 {
				t.Errorf("the prompt took %d tokens, want 3", res.PromptTokens)
			}
			if res.Tokens < 1 {
				t.Errorf("generated %d tokens, want at least one", res.Tokens)
			}
			t.Logf("engine %d ms, load %d ms, %d tokens at %.0f/s: %q", res.EngineMs, res.LoadMs, res.Tokens, res.TokensPerSecond, res.Text)
		})
	}
}

func TestLlamaCppRefuses(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		// llama.cpp's own words, as llama-server logs them.
		{"unknown architecture", Spec{Architecture: "foo"}, "unknown model architecture: 'foo'"},
		// A projector is loaded beside a model, never as one.
		{"projector as a model", Spec{Projector: true}, "Failed to load model"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "model.gguf")
			if err := WriteFile(path, tc.spec); err != nil {
				t.Fatal(err)
			}
			_, stderr, err := probe(t, path)
			if err == nil {
				t.Fatal("llama.cpp loaded it")
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("llama.cpp said %q, want it to say %q", stderr, tc.want)
			}
		})
	}
}

func TestLlamaCppEmbeds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "embed.gguf")
	if err := WriteFile(path, Spec{Pooling: new(uint32(1)), EmbeddingLength: 96, HeadCount: 6, HeadCountKV: 3}); err != nil {
		t.Fatal(err)
	}
	res, stderr, err := probe(t, path, "--embedding", "--prompt", "hello world")
	if err != nil {
		t.Fatalf("llama.cpp did not load it: %v\n%s", err, stderr)
	}
	if res.VectorLength != 96 || !res.Finite {
		t.Errorf("a vector of %d (finite %v), want 96 finite numbers", res.VectorLength, res.Finite)
	}
}

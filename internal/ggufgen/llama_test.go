package ggufgen

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"modelserve/internal/llamatest"
)

// readyTimeout bounds a tiny model's load, which takes tens of milliseconds
// when the machine is idle and more when other tests share its two cores.
const readyTimeout = time.Minute

// post sends body as JSON to url and decodes the 200 answer into out.
func post(t *testing.T, url, body string, out any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s %s", url, resp.Status, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("POST %s answered %s: %v", url, data, err)
	}
}

// serve starts llama-server on path and waits until it has loaded.
func serve(t *testing.T, path string, args ...string) string {
	t.Helper()
	url, _ := llamatest.Start(t, append([]string{"--model", path, "--ctx-size", "1024", "--parallel", "1"}, args...)...)
	llamatest.WaitReady(t, url, readyTimeout)
	return url
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
			url := serve(t, path)

			// What llama.cpp read of the header.
			var models struct {
				Data []struct {
					Meta struct {
						TrainContext int `json:"n_ctx_train"`
						Embedding    int `json:"n_embd"`
					} `json:"meta"`
				} `json:"data"`
			}
			resp, err := http.Get(url + "/v1/models")
			if err != nil {
				t.Fatal(err)
			}
			err = json.NewDecoder(resp.Body).Decode(&models)
			resp.Body.Close()
			if err != nil || len(models.Data) != 1 {
				t.Fatalf("/v1/models: %v, %d models", err, len(models.Data))
			}
			s := tc.spec.withDefaults()
			if m := models.Data[0].Meta; m.TrainContext != int(s.ContextLength) || m.Embedding != int(s.EmbeddingLength) {
				t.Errorf("llama.cpp read a context of %d and %d wide, want %d and %d",
					m.TrainContext, m.Embedding, s.ContextLength, s.EmbeddingLength)
			}

			// "the world" is <s> ▁the ▁world: llama.cpp's tokenizer reaches
			// the words through their prefixes rather than falling back to
			// bytes.
			var tok struct{ Tokens []int }
			post(t, url+"/tokenize", `{"content": "the world", "add_special": true}`, &tok)
			if len(tok.Tokens) != 3 {
				t.Errorf("the prompt took %d tokens (%v), want 3", len(tok.Tokens), tok.Tokens)
			}

			var chat struct {
				Usage struct {
					Completion int `json:"completion_tokens"`
				}
				Timings struct {
					PerSecond float64 `json:"predicted_per_second"`
				}
			}
			post(t, url+"/v1/chat/completions", `{"messages": [{"role": "user", "content": "the world"}], "max_tokens": 16}`, &chat)
			if chat.Usage.Completion < 1 {
				t.Errorf("generated %d tokens, want at least one", chat.Usage.Completion)
			}
			t.Logf("%d tokens at %.0f/s", chat.Usage.Completion, chat.Timings.PerSecond)
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
		{"projector as a model", Spec{Projector: true}, "failed to load model"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "model.gguf")
			if err := WriteFile(path, tc.spec); err != nil {
				t.Fatal(err)
			}
			cmd := llamatest.Command(t, append([]string{"--model", path, "--port", "0"}, llamatest.Threads...)...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			done := make(chan error, 1)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { llamatest.Stop(cmd) })
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatalf("llama-server exited 0 on a model it cannot load:\n%s", out.String())
				}
			case <-time.After(readyTimeout):
				t.Fatalf("llama-server loaded it and kept serving:\n%s", out.String())
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Errorf("llama-server said\n%s\nwant it to say %q", out.String(), tc.want)
			}
		})
	}
}

func TestLlamaCppEmbeds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "embed.gguf")
	if err := WriteFile(path, Spec{Pooling: new(uint32(1)), EmbeddingLength: 96, HeadCount: 6, HeadCountKV: 3}); err != nil {
		t.Fatal(err)
	}
	url := serve(t, path, "--embedding")
	var res struct {
		Data []struct{ Embedding []float64 }
	}
	post(t, url+"/v1/embeddings", `{"input": "hello world"}`, &res)
	if len(res.Data) != 1 {
		t.Fatalf("%d embeddings, want 1", len(res.Data))
	}
	v := res.Data[0].Embedding
	finite := len(v) > 0
	for _, x := range v {
		finite = finite && !math.IsNaN(x) && !math.IsInf(x, 0)
	}
	if len(v) != 96 || !finite {
		t.Errorf("a vector of %d (finite %v), want 96 finite numbers", len(v), finite)
	}
}

package vllmtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// modelDir is a mirrored folder of original weights: a public config.json
// (from internal/plan's test data) and shards of the given size, sparse on
// disk.
func modelDir(t *testing.T, config string, shards int, total int64) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join("..", "plan", "testdata", "configs", config))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range shards {
		f, err := os.Create(filepath.Join(dir, "model-0000"+string(rune('1'+i))+".safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		f.Truncate(total / int64(shards))
		f.Close()
	}
	return dir
}

const gib = 1 << 30

func TestArgumentsAreTheReleases(t *testing.T) {
	tests := []struct {
		name string
		argv []string
		want string // the usage error, "" for none
	}{
		{"modelserve's command line", []string{"/weights", "--served-model-name", "m", "--tensor-parallel-size", "2", "--max-model-len", "4096",
			"--max-num-seqs", "4", "--gpu-memory-utilization", "0.9", "--host", "0.0.0.0", "--port", "8080"}, ""},
		{"aliases and =", []string{"--model=/weights", "-tp", "2", "--enable-prefix-caching"}, ""},
		{"a llama.cpp flag", []string{"/weights", "--ctx-size", "4096"}, "vllm serve: error: unrecognized arguments: --ctx-size 4096"},
		{"a misspelt flag", []string{"/weights", "--tensor-paralel-size", "2"}, "vllm serve: error: unrecognized arguments: --tensor-paralel-size 2"},
		{"no value", []string{"/weights", "--max-model-len"}, "vllm serve: error: argument --max-model-len: expected one argument"},
		{"not a number", []string{"/weights", "--max-num-seqs", "many"}, "vllm serve: error: argument --max-num-seqs: invalid int value: 'many'"},
		{"a value for a switch", []string{"/weights", "--enforce-eager=yes"}, "vllm serve: error: argument --enforce-eager: ignored explicit argument 'yes'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := ParseArgs(tt.argv, nil)
			var exit *Exit
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want == "":
				if a.Model != "/weights" || a.TensorParallel < 1 {
					t.Errorf("parsed %+v", a)
				}
			case !errors.As(err, &exit) || exit.Code != 2 || !strings.HasSuffix(exit.Log, tt.want):
				t.Errorf("got %v, want exit 2 saying %q", err, tt.want)
			}
		})
	}
	a, _ := ParseArgs([]string{"/weights"}, func(k string) string { return map[string]string{"VLLM_API_KEY": "k1"}[k] })
	if a.APIKey != "k1" || a.ServedModelName != "/weights" || a.Port != 8000 {
		t.Errorf("defaults %+v: want the key from VLLM_API_KEY, the model's path as its name, port 8000", a)
	}
}

// TestStartsAreCheckedInVLLMsWords: what vLLM refuses as it starts, the
// double refuses with the same ValueError.
func TestStartsAreCheckedInVLLMsWords(t *testing.T) {
	vl := modelDir(t, "qwen2.5-vl-7b-instruct.json", 4, 16*gib)
	llama := modelDir(t, "llama-3.1-8b-instruct.json", 4, 15*gib)
	l4 := Hardware{Cards: 8, CardBytes: 23034 << 20}
	tests := []struct {
		name string
		argv []string
		hw   Hardware
		want string
	}{
		{"a tensor-parallel size that does not divide the heads", []string{vl, "--tensor-parallel-size", "8"}, l4,
			"ValueError: Total number of attention heads (28) must be divisible by tensor parallel size (8)."},
		{"a context longer than trained", []string{llama, "--max-model-len", "262144"}, l4,
			"ValueError: User-specified max_model_len (262144) is greater than the derived max_model_len (max_position_embeddings=131072"},
		{"weights that leave no room", []string{llama}, Hardware{Cards: 1, CardBytes: 16 * gib},
			"ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."},
		{"a context the cache cannot hold", []string{llama}, Hardware{Cards: 1, CardBytes: 23034 << 20},
			"ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can be stored in KV cache (26576). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."},
		{"more cards than the pod has", []string{llama, "-tp", "4"}, Hardware{Cards: 2, CardBytes: 23034 << 20},
			"ValueError: The number of required GPUs exceeds the total number of available GPUs in the placement group."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := ParseArgs(tt.argv, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = Check(a, tt.hw, nil)
			var exit *Exit
			if !errors.As(err, &exit) || exit.Code != 1 || !strings.HasPrefix(exit.Log, tt.want) {
				t.Errorf("got %v, want exit 1 with %q", err, tt.want)
			}
		})
	}
	// What fits starts: Llama 3.1 8B on one L4 with a 16384-token context.
	a, _ := ParseArgs([]string{llama, "--max-model-len", "16384", "--max-num-seqs", "4"}, nil)
	if _, tokens, err := Check(a, l4, nil); err != nil || tokens < 16384 {
		t.Errorf("Llama 3.1 8B on an L4 at 16384 tokens: %v, a cache of %d tokens", err, tokens)
	}
}

// TestServesVLLMsRoutesOnceLoaded runs the double: nothing listens while it
// loads, then /health, the OpenAI routes behind the key and /metrics
// under vLLM's names.
func TestServesVLLMsRoutesOnceLoaded(t *testing.T) {
	dir := modelDir(t, "llama-3.1-8b-instruct.json", 4, 15*gib)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens until the load is over, as with vLLM
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	argv := []string{dir, "--served-model-name", "llama", "--max-model-len", "8192", "--max-num-seqs", "2", "--host", "127.0.0.1",
		"--port", strings.TrimPrefix(addr[strings.LastIndex(addr, ":"):], ":")}
	go func() {
		done <- Run(ctx, argv, Options{Hardware: Hardware{Cards: 1, CardBytes: 23034 << 20}, Load: 300 * time.Millisecond,
			Env: func(k string) string { return map[string]string{"VLLM_API_KEY": "sekrit"}[k] }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, ErrStopped) {
			t.Errorf("Run: %v", err)
		}
	})
	base := "http://" + addr
	if _, err := http.Get(base + "/health"); err == nil {
		t.Error("/health answered while the model loads; vLLM listens only once loaded")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(base + "/health")
		if err == nil && resp.StatusCode == http.StatusOK {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/health never answered: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	do := func(method, path, key, body string) (*http.Response, string) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	if resp, body := do("GET", "/v1/models", "", ""); resp.StatusCode != 401 || strings.TrimSpace(body) != `{"error":"Unauthorized"}` {
		t.Errorf("without the key: %d %s", resp.StatusCode, body)
	}
	if _, body := do("GET", "/v1/models", "sekrit", ""); !strings.Contains(body, `"id":"llama"`) || !strings.Contains(body, `"max_model_len":8192`) {
		t.Errorf("/v1/models: %s", body)
	}
	if resp, body := do("POST", "/v1/chat/completions", "sekrit", `{"model": "other", "messages": [{"role": "user", "content": "hi"}]}`); resp.StatusCode != 404 ||
		!strings.Contains(body, "The model `other` does not exist.") {
		t.Errorf("another model: %d %s", resp.StatusCode, body)
	}
	_, body := do("POST", "/v1/chat/completions", "sekrit", `{"model": "llama", "messages": [{"role": "user", "content": "hi"}]}`)
	var answer struct {
		Choices []struct {
			Message struct{ Content string }
		}
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	if err := json.Unmarshal([]byte(body), &answer); err != nil || len(answer.Choices) != 1 || answer.Choices[0].Message.Content != "Hello from vLLM." ||
		answer.Usage.CompletionTokens != 3 {
		t.Errorf("chat: %s", body)
	}
	resp, body := do("POST", "/v1/chat/completions", "sekrit", `{"model": "llama", "stream": true, "messages": [{"role": "user", "content": "hi"}]}`)
	var events []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, d)
		}
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || len(events) != 5 || events[4] != "[DONE]" ||
		!strings.Contains(events[0], `"content":"Hello"`) {
		t.Errorf("stream %q", events)
	}
	_, metrics := do("GET", "/metrics", "", "")
	for _, name := range []string{`vllm:num_requests_running{model_name="llama"} 0`, `vllm:num_requests_waiting{model_name="llama"} 0`,
		`vllm:gpu_cache_usage_perc{model_name="llama"}`, `vllm:gpu_prefix_cache_hits_total{model_name="llama"}`,
		`vllm:generation_tokens_total{model_name="llama"} 6`} {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics lacks %s:\n%s", name, metrics)
		}
	}
}

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
		{"a --no- form and a list", []string{"/weights", "--no-enable-prefix-caching", "--served-model-name", "m", "other", "--api-key=k"}, ""},
		{"a flag 0.11 no longer has", []string{"/weights", "--num-scheduler-steps", "8"}, "vllm serve: error: unrecognized arguments: --num-scheduler-steps 8"},
		{"an empty list", []string{"/weights", "--served-model-name", "--port", "1"}, "vllm serve: error: argument --served-model-name: expected at least one argument"},
		{"a llama.cpp flag", []string{"/weights", "--ctx-size", "4096"}, "vllm serve: error: unrecognized arguments: --ctx-size 4096"},
		{"a misspelt flag", []string{"/weights", "--tensor-paralel-size", "2"}, "vllm serve: error: unrecognized arguments: --tensor-paralel-size 2"},
		{"no value", []string{"/weights", "--max-model-len"}, "vllm serve: error: argument --max-model-len: expected one argument"},
		{"not a number", []string{"/weights", "--max-num-seqs", "many"}, "vllm serve: error: argument --max-num-seqs: invalid int value: 'many'"},
		{"not a length", []string{"/weights", "--max-model-len", "long"}, "vllm serve: error: argument --max-model-len: invalid human_readable_int value: 'long'"},
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
	for _, name := range []string{`vllm:num_requests_running{engine="0",model_name="llama"} 0`, `vllm:num_requests_waiting{engine="0",model_name="llama"} 0`,
		`vllm:kv_cache_usage_perc{engine="0",model_name="llama"}`, `vllm:prefix_cache_hits_total{engine="0",model_name="llama"}`,
		`vllm:generation_tokens_total{engine="0",model_name="llama"} 6`} {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics lacks %s:\n%s", name, metrics)
		}
	}
}

// serve runs the double with argv on a loopback port until the test ends,
// and says where.
func serve(t *testing.T, argv ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dir := modelDir(t, "llama-3.1-8b-instruct.json", 4, 15*gib)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, append([]string{dir, "--served-model-name", "llama", "--max-model-len", "8192"}, argv...),
			Options{Hardware: Hardware{Cards: 1, CardBytes: 23034 << 20}, Load: time.Millisecond, Listener: ln})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, ErrStopped) {
			t.Errorf("Run: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// TestPrefixCacheReuseIsSaid: a conversation that goes on finds its
// beginning in vLLM's prefix cache, in whole blocks; the answer's usage
// says how many tokens were taken from it when the server is started
// with --enable-prompt-tokens-details, and /metrics counts them.
func TestPrefixCacheReuseIsSaid(t *testing.T) {
	words := strings.Repeat("word ", 40)
	first := `{"model": "llama", "messages": [{"role": "user", "content": "` + words + `"}]}`
	second := `{"model": "llama", "messages": [{"role": "user", "content": "` + words + `"}, {"role": "assistant", "content": "Hello from vLLM."},` +
		` {"role": "user", "content": "and more"}], "stream": true, "stream_options": {"include_usage": true}}`
	cachedOf := func(base, body string) string {
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		s := string(b)
		if i := strings.LastIndex(s, `"usage"`); i >= 0 {
			s = s[i:]
		}
		d := strings.Index(s, `"prompt_tokens_details":`)
		if d < 0 {
			t.Fatalf("an answer without usage: %s", b)
		}
		details := s[d+len(`"prompt_tokens_details":`):]
		if end := strings.IndexAny(details, ",}"); end >= 0 {
			details = details[:end]
		}
		return details
	}

	base := serve(t, "--enable-prompt-tokens-details")
	if got := cachedOf(base, first); got != "null" {
		t.Errorf("the first prompt's details %s, want null: nothing was cached yet", got)
	}
	// The first turn is 43 tokens (its roles and template's with its
	// words): its two whole blocks are what the second, of 52, finds
	// again.
	if got := cachedOf(base, second); got != `{"cached_tokens":32` {
		t.Errorf("the conversation's second turn says %s, want cached_tokens 32", got)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `vllm:prefix_cache_hits_total{engine="0",model_name="llama"} 32`) ||
		!strings.Contains(string(b), `vllm:prefix_cache_queries_total{engine="0",model_name="llama"} 95`) {
		t.Errorf("/metrics does not count 95 tokens queried and 32 hit:\n%s", b)
	}

	// Without the flag vLLM does not say, whatever it cached.
	quiet := serve(t)
	cachedOf(quiet, first)
	if got := cachedOf(quiet, second); got != "null" {
		t.Errorf("without --enable-prompt-tokens-details the details are %s, want null", got)
	}
}

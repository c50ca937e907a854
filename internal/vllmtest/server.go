package vllmtest

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options are what a test sets of the double beside its arguments.
type Options struct {
	Hardware Hardware
	// Load is how long it loads before it listens (LoadTime when zero): a
	// real vLLM's HTTP server starts only once the weights are on the
	// cards, so before then a connection is refused.
	Load time.Duration
	// Listener, when set, is where it serves instead of --host:--port (a
	// test's free loopback port).
	Listener net.Listener
	// Reply is what every completion answers ("Hello from vLLM." when
	// empty).
	Reply string
	Env   func(string) string
	Log   io.Writer
}

// Run is `vllm serve` with argv: it checks them as vLLM does, loads, then
// serves until ctx ends. A start vLLM would refuse returns its *Exit.
func Run(ctx context.Context, argv []string, o Options) error {
	a, err := ParseArgs(argv, o.Env)
	if err != nil {
		return err
	}
	c, tokens, err := Check(a, o.Hardware, o.Env)
	if err != nil {
		return err
	}
	log := o.Log
	if log == nil {
		log = io.Discard
	}
	fmt.Fprintf(log, "INFO vLLM API server version %s\nINFO # GPU blocks: %d\nINFO Maximum concurrency for %d tokens per request: %.2fx\n",
		Version, tokens/blockSize, max(a.MaxModelLen, c.MaxPosition), float64(tokens)/float64(max(a.MaxModelLen, 1)))
	select {
	case <-time.After(cmp.Or(o.Load, LoadTime)):
	case <-ctx.Done():
		return ErrStopped
	}
	ln := o.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", net.JoinHostPort(a.Host, strconv.Itoa(a.Port))); err != nil {
			return &Exit{Code: 1, Log: "OSError: [Errno 98] error while attempting to bind on address: address already in use"}
		}
	}
	s := &server{args: a, maxLen: cmp.Or(a.MaxModelLen, c.MaxPosition), reply: o.Reply, started: time.Now(),
		cacheTokens: max(tokens, 1), cache: newPrefixCache(a, tokens)}
	if s.reply == "" {
		s.reply = "Hello from vLLM."
	}
	srv := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(log, "INFO Started server process\nINFO Uvicorn running on http://%s\n", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		<-done
		return ErrStopped
	case err := <-done:
		return err
	}
}

// server is the double's OpenAI server.
type server struct {
	args    Args
	maxLen  int
	reply   string
	started time.Time

	mu          sync.Mutex
	running     int
	inUse       int64        // tokens of the running requests' prompts in the KV cache
	cacheTokens int64        // tokens the KV cache holds
	cache       *prefixCache // nil with --no-enable-prefix-caching
	// Counters of what it served, for /metrics: prompt tokens (cached
	// ones too, as vLLM counts them), of those the ones queried in and
	// taken from the prefix cache, tokens generated and answers.
	prompt, queried, hits, generation, succeeded atomic.Int64
}

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"version": Version})
	})
	mux.HandleFunc("GET /metrics", s.metrics)
	mux.HandleFunc("GET /v1/models", s.authed(s.models))
	mux.HandleFunc("POST /v1/chat/completions", s.authed(s.complete(true)))
	mux.HandleFunc("POST /v1/completions", s.authed(s.complete(false)))
	return mux
}

// authed is vLLM's --api-key check: every /v1 route needs the bearer key.
func (s *server) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.args.APIKey != "" {
			got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			if subtle.ConstantTimeCompare([]byte(got), []byte(s.args.APIKey)) != 1 {
				writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized"})
				return
			}
		}
		h(w, r)
	}
}

func (s *server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{{
		"id": s.args.ServedModelName, "object": "model", "created": s.started.Unix(), "owned_by": "vllm",
		"root": s.args.Model, "parent": nil, "max_model_len": s.maxLen,
	}}})
}

// notFound is vLLM's answer for a model it does not serve.
func notFound(w http.ResponseWriter, model string) {
	writeJSON(w, http.StatusNotFound, map[string]any{"object": "error", "message": fmt.Sprintf("The model `%s` does not exist.", model),
		"type": "NotFoundError", "param": nil, "code": http.StatusNotFound})
}

func badRequest(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusBadRequest, map[string]any{"object": "error", "message": msg, "type": "BadRequestError", "param": nil, "code": http.StatusBadRequest})
}

// complete answers a chat or text completion: the fixed reply, a word a
// token, streamed as vLLM streams when asked.
func (s *server) complete(chat bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model    string `json:"model"`
			Stream   bool   `json:"stream"`
			Messages []struct {
				Role    string `json:"role"`
				Content any    `json:"content"`
			} `json:"messages"`
			Prompt        any `json:"prompt"`
			StreamOptions *struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(&req); err != nil {
			badRequest(w, "The request body is not valid JSON.")
			return
		}
		if req.Model != s.args.ServedModelName {
			notFound(w, req.Model)
			return
		}
		if chat && len(req.Messages) == 0 {
			badRequest(w, "messages: Field required")
			return
		}
		s.mu.Lock()
		s.running++
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.running--
			s.mu.Unlock()
		}()
		// The prompt's tokens are its words (a chat's with its roles and
		// two of the template's a turn), so that a conversation that goes
		// on repeats the tokens it began with, as a real template does.
		var prompt []string
		if chat {
			for _, m := range req.Messages {
				prompt = append(append(prompt, "<|"+m.Role+"|>"), strings.Fields(textOf(m.Content))...)
				prompt = append(prompt, "<|end|>")
			}
		} else {
			prompt = strings.Fields(textOf(req.Prompt))
		}
		prompt = append(prompt, "<|assistant|>")
		promptTokens := int64(len(prompt))
		cached := int64(0)
		s.mu.Lock()
		if s.cache != nil {
			cached = int64(s.cache.take(prompt))
			s.queried.Add(promptTokens)
			s.hits.Add(cached)
		}
		s.inUse += promptTokens
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.inUse -= promptTokens
			s.mu.Unlock()
		}()
		words := strings.Fields(s.reply)
		s.prompt.Add(promptTokens)
		s.generation.Add(int64(len(words)))
		s.succeeded.Add(1)
		id := fmt.Sprintf("cmpl-%d", time.Now().UnixNano())
		object := "text_completion"
		if chat {
			object, id = "chat.completion", "chat"+id
		}
		// vLLM says how much of the prompt its prefix cache held only
		// with --enable-prompt-tokens-details, and only when it held some.
		usage := map[string]any{"prompt_tokens": promptTokens, "completion_tokens": len(words),
			"total_tokens": promptTokens + int64(len(words)), "prompt_tokens_details": nil}
		if _, ok := s.args.Given["--enable-prompt-tokens-details"]; ok && cached > 0 {
			usage["prompt_tokens_details"] = map[string]any{"cached_tokens": cached}
		}
		choice := func(text string, finish any) map[string]any {
			if !chat {
				return map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": finish}
			}
			if finish == nil && text != "" {
				return map[string]any{"index": 0, "delta": map[string]string{"content": text}, "logprobs": nil, "finish_reason": nil}
			}
			return map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text, "tool_calls": []any{}},
				"logprobs": nil, "finish_reason": finish, "stop_reason": nil}
		}
		if !req.Stream {
			writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": object, "created": time.Now().Unix(), "model": req.Model,
				"choices": []any{choice(s.reply, "stop")}, "usage": usage})
			return
		}
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		flusher, _ := w.(http.Flusher)
		chunk := object
		if chat {
			chunk = "chat.completion.chunk"
		}
		for i, word := range words {
			text := word
			if i > 0 {
				text = " " + word
			}
			b, _ := json.Marshal(map[string]any{"id": id, "object": chunk, "created": time.Now().Unix(), "model": req.Model,
				"choices": []any{choice(text, nil)}})
			fmt.Fprintf(w, "data: %s\n\n", b)
			if flusher != nil {
				flusher.Flush()
			}
		}
		last := map[string]any{"index": 0, "delta": map[string]string{}, "logprobs": nil, "finish_reason": "stop", "stop_reason": nil}
		if !chat {
			last = map[string]any{"index": 0, "text": "", "logprobs": nil, "finish_reason": "stop", "stop_reason": nil}
		}
		b, _ := json.Marshal(map[string]any{"id": id, "object": chunk, "created": time.Now().Unix(), "model": req.Model,
			"choices": []any{last}})
		fmt.Fprintf(w, "data: %s\n\n", b)
		// A stream's usage is a chunk of its own, and only when asked for.
		if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
			b, _ := json.Marshal(map[string]any{"id": id, "object": chunk, "created": time.Now().Unix(), "model": req.Model,
				"choices": []any{}, "usage": usage})
			fmt.Fprintf(w, "data: %s\n\n", b)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
}

// metrics is vLLM's Prometheus text under the names current in 0.11,
// labelled as vLLM labels them (the served model's name and the engine's
// index). The gpu_ names 0.11 deprecates for these are left out, so a
// reader that knows only those finds nothing here.
func (s *server) metrics(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	running := s.running
	// Blocks kept for the prefix cache but held by no request count as
	// free, as vLLM counts them.
	usage := min(1, float64(s.inUse)/float64(s.cacheTokens))
	s.mu.Unlock()
	label := fmt.Sprintf(`{engine="0",model_name=%q}`, s.args.ServedModelName)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	lines := []struct {
		name, kind, help string
		value            float64
	}{
		{"vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", float64(running)},
		{"vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", 0},
		{"vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", usage},
		{"vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.", float64(s.queried.Load())},
		{"vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.", float64(s.hits.Load())},
		{"vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", float64(s.prompt.Load())},
		{"vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", float64(s.generation.Load())},
	}
	for _, l := range lines {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s%s %g\n", l.name, l.help, l.name, l.kind, l.name, label, l.value)
	}
	fmt.Fprintf(w, "# HELP vllm:request_success_total Count of successfully processed requests.\n# TYPE vllm:request_success_total counter\n"+
		"vllm:request_success_total{engine=\"0\",finished_reason=\"stop\",model_name=%q} %d\n", s.args.ServedModelName, s.succeeded.Load())
}

// textOf is a message's or prompt's text: a string, or the text parts of
// a list of them.
func textOf(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []any:
		var parts []string
		for _, p := range v {
			switch p := p.(type) {
			case string:
				parts = append(parts, p)
			case map[string]any:
				if t, ok := p["text"].(string); ok {
					parts = append(parts, t)
				}
			}
		}
		return strings.Join(parts, " ")
	}
	return ""
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

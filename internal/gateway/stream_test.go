package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"modelserve/internal/ggufgen"
	"modelserve/internal/operr"
)

// TestAskStream is the console's playground calling a model in-process: the
// reply comes chunk by chunk as the engine writes it, the same reply a
// client gets; an answer that is not a stream comes whole; a refusal is the
// gateway's sentence; and a caller that stops reading frees the request.
func TestAskStream(t *testing.T) {
	e := mustEnv(t, Options{})
	e.mustAdd(chatModel(t, "tiny", ggufgen.Spec{}))
	e.mustAdd(embedModel(t, "embed"))
	e.waitServing("tiny", 1)
	e.waitServing("embed", 1)
	ctx := context.Background()
	chat := func(maxTokens int) []byte {
		b, _ := json.Marshal(map[string]any{
			"model": "tiny", "stream": true, "max_tokens": maxTokens, "temperature": 0,
			"stream_options": map[string]any{"include_usage": true},
			"messages":       []map[string]string{{"role": "user", "content": "Say hello."}},
		})
		return b
	}

	t.Run("stream", func(t *testing.T) {
		var reply strings.Builder
		chunks, completion := 0, 0
		err := e.gw.AskStream(ctx, "/v1/chat/completions", chat(24), func(data []byte) error {
			var c struct {
				Choices []struct {
					Delta struct {
						Content string `json:"content"`
					} `json:"delta"`
				} `json:"choices"`
				Usage *struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(data, &c); err != nil {
				t.Errorf("a chunk is not JSON: %q", data)
			}
			chunks++
			for _, ch := range c.Choices {
				reply.WriteString(ch.Delta.Content)
			}
			if c.Usage != nil {
				completion = c.Usage.CompletionTokens
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if chunks < 3 || reply.Len() == 0 || completion == 0 {
			t.Errorf("%d chunks, reply %q, %d completion tokens; want a reply in several chunks with its usage", chunks, reply.String(), completion)
		}
		// The same request, plain, gives the same reply (temperature 0).
		var whole struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		plain, _ := json.Marshal(map[string]any{"model": "tiny", "max_tokens": 24, "temperature": 0,
			"messages": []map[string]string{{"role": "user", "content": "Say hello."}}})
		b, err := e.gw.Ask(ctx, "/v1/chat/completions", plain)
		if err != nil || json.Unmarshal(b, &whole) != nil || len(whole.Choices) == 0 {
			t.Fatalf("the plain answer: %s, %v", b, err)
		}
		if got := whole.Choices[0].Message.Content; got != reply.String() {
			t.Errorf("the chunks make %q, the plain answer is %q", reply.String(), got)
		}
	})

	t.Run("not a stream", func(t *testing.T) {
		calls := 0
		var out struct {
			Data []struct {
				Embedding []float64 `json:"embedding"`
			} `json:"data"`
		}
		err := e.gw.AskStream(ctx, "/v1/embeddings", []byte(`{"model":"embed","input":"hello"}`), func(data []byte) error {
			calls++
			return json.Unmarshal(data, &out)
		})
		if err != nil || calls != 1 || len(out.Data) != 1 || len(out.Data[0].Embedding) != 96 {
			t.Fatalf("embeddings: %v, %d calls, %+v; want one call with a vector of 96", err, calls, out.Data)
		}
	})

	t.Run("unknown model", func(t *testing.T) {
		err := e.gw.AskStream(ctx, "/v1/chat/completions", []byte(`{"model":"nope","stream":true,"messages":[]}`), func([]byte) error {
			t.Error("each was called for a refusal")
			return nil
		})
		msg, ok := operr.Sentence(err)
		if !ok || !strings.Contains(msg, "404") || !strings.Contains(msg, "nope") {
			t.Fatalf("err %v; want the gateway's 404 naming the model", err)
		}
	})

	t.Run("caller stops", func(t *testing.T) {
		stop := errors.New("enough")
		calls := 0
		start := time.Now()
		err := e.gw.AskStream(ctx, "/v1/chat/completions", chat(400), func([]byte) error {
			calls++
			if calls == 2 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || calls != 2 {
			t.Fatalf("err %v after %d calls; want each's own error after the second", err, calls)
		}
		// Stopped, not failed: the replica stays in use and the request is
		// counted as a client gone.
		e.waitCounter(t, e.gw.metrics.requests, 1, "tiny", "tiny-1", "499")
		p := e.gw.pool("tiny")
		p.mu.Lock()
		failed := p.failed["tiny-1"]
		p.mu.Unlock()
		if failed.After(start) {
			t.Error("a caller that stopped reading marked the replica failed")
		}
		if err := e.gw.AskStream(ctx, "/v1/chat/completions", chat(4), func([]byte) error { return nil }); err != nil {
			t.Errorf("the next request: %v", err)
		}
	})

	t.Run("traffic", func(t *testing.T) {
		tr := e.gw.Traffic()
		if got := tr["tiny"]; got.Requests < 4 || got.Answered < 3 || got.P50 <= 0 || got.Failed != 0 {
			t.Errorf("tiny's traffic %+v; want the requests above, answered, with a median latency", got)
		}
		if got := tr["embed"]; got.Requests != 1 || got.Answered != 1 {
			t.Errorf("embed's traffic %+v; want one request answered", got)
		}
		if _, ok := tr["nope"]; ok {
			t.Error("a model not in the catalog has traffic")
		}
	})
}

// TestTrafficWindow: the last minute's requests, and a median read from the
// latency slots within a few percent; what is older than a minute is gone.
func TestTrafficWindow(t *testing.T) {
	r := newRecent()
	now := time.Unix(1_700_000_000, 0)
	for i := range 100 {
		// 1 ms to 100 ms: the median is about 50 ms.
		r.done("m", 200, time.Duration(i+1)*time.Millisecond, now.Add(-time.Duration(i%50)*time.Second))
	}
	r.done("m", 503, 0, now)
	r.done("m", 429, 0, now)
	r.done("old", 200, time.Second, now.Add(-2*time.Minute))
	got := r.read(now)
	m := got["m"]
	if m.Requests != 102 || m.Answered != 100 || m.Failed != 2 {
		t.Errorf("m: %+v; want 102 requests, 100 answered, 2 failed", m)
	}
	if m.P50 < 45*time.Millisecond || m.P50 > 56*time.Millisecond {
		t.Errorf("m's median %s; want about 50ms", m.P50)
	}
	if _, ok := got["old"]; ok {
		t.Error("a request two minutes ago is in the last minute")
	}
	// A minute later nothing is left.
	if later := r.read(now.Add(61 * time.Second)); len(later) != 0 {
		t.Errorf("a minute later: %+v", later)
	}
}

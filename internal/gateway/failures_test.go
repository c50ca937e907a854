package gateway

import (
	"context"
	"net/http"
	"testing"
	"time"

	"modelserve/internal/ggufgen"
	"modelserve/internal/testkit"
)

// TestClientsOwnErrorsAreNotTheModelsFailures: the console's "N failed" of
// a model, and a canary's judge (Measure), count what the model failed,
// not what its clients got wrong: a bad token, an unknown route, a route
// the engine was not started for, tools that are not a list, a client that
// hung up mid-answer. The replica is not avoided for them either.
func TestClientsOwnErrorsAreNotTheModelsFailures(t *testing.T) {
	e := mustEnv(t, Options{})
	e.mustAdd(chatModel(t, "tiny", ggufgen.Spec{}))
	e.mustAdd(longModel(t, "long"))
	e.waitServing("tiny", 1)
	e.waitServing("long", 1)
	meter := e.gw.Measure("tiny")
	defer meter.Stop()
	ctx := context.Background()
	chat := map[string]any{"model": "tiny", "max_tokens": 2, "messages": []map[string]string{{"role": "user", "content": "hi"}}}

	for _, c := range []struct {
		name, path, token string
		body              any
		status            int
	}{
		{"a bad token", "/v1/chat/completions", "ms_forged", chat, http.StatusUnauthorized},
		{"an unknown route", "/v1/nothing", e.token, chat, http.StatusNotFound},
		{"reranking of a model not served for it", "/v1/rerank", e.token, map[string]any{"model": "tiny", "query": "a", "documents": []string{"b"}}, http.StatusNotImplemented},
		{"tools that are not a list", "/v1/chat/completions", e.token, map[string]any{"model": "tiny", "tools": "x", "messages": chat["messages"]}, http.StatusBadRequest},
	} {
		if resp, body := e.post(ctx, c.path, c.token, c.body); resp.StatusCode != c.status {
			t.Errorf("%s: %d %s; want %d", c.name, resp.StatusCode, body, c.status)
		}
	}
	cancel, done := e.startStream(long)
	cancel()
	<-done
	// And one answered, after them all: the replica was not avoided.
	if resp, body := e.post(ctx, "/v1/chat/completions", e.token, chat); resp.StatusCode != http.StatusOK {
		t.Fatalf("a good request after them: %d %s", resp.StatusCode, body)
	}
	// The traffic and the meter each count a request as it ends, one a
	// moment after the other.
	testkit.WaitFor(t, 2*time.Second, "the requests counted", func() (bool, string) {
		tr := e.gw.Traffic()
		return tr["tiny"].Requests == 4 && tr["long"].Requests == 1 && meter.Read().Requests == 4, ""
	})
	for model, tr := range e.gw.Traffic() {
		if tr.Failed != 0 {
			t.Errorf("%s's last minute: %+v; want no failure", model, tr)
		}
	}
	if got := meter.Read(); got.Requests != 4 || got.Failed != 0 {
		t.Errorf("tiny's meter: %+v; want 4 requests, none failed", got)
	}
	p := e.gw.pool("tiny")
	p.mu.Lock()
	avoided := len(p.failed)
	p.mu.Unlock()
	if avoided != 0 {
		t.Errorf("tiny's replica is avoided after its clients' errors")
	}
}

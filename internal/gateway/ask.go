package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"modelserve/internal/auth"
	"modelserve/internal/chat"
	"modelserve/internal/operr"
)

// self is modelserve itself as a caller: its own requests (the job's smoke
// test) need no token, and may use any model, a canary by its own name
// included (which a client cannot name).
var self = auth.Token{Name: "modelserve", Scope: auth.ScopeAll}

// Ask sends body to route (such as "/v1/chat/completions") for a model as
// a client's request goes, by the same routing, queueing and starting on
// demand, and returns the answer of a 200. Any other answer is an
// operator's error carrying the gateway's or the engine's sentence. It may
// name a canary, to ask the new version alone; a request naming the
// canary's model is split as a client's is.
// An answer that no replica began (a 502) wraps chat.ErrNoAnswer, and an
// engine's that it is still loading the model wraps chat.ErrLoading.
func (g *Gateway) Ask(ctx context.Context, route string, body []byte) ([]byte, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, route, bytes.NewReader(body))
	if err != nil {
		return nil, operr.Wrap(operr.Invalid, err, "%s is not a route of the gateway", operr.Quote(route))
	}
	r.Header.Set("Content-Type", "application/json")
	rec := &recorder{header: http.Header{}}
	g.forward(rec, r, self, true, time.Now()) // its arrival: wall time, as Forward's
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if rec.status == 0 || rec.status == http.StatusOK {
		return rec.body.Bytes(), nil
	}
	return nil, answerError(rec.status, rec.body.Bytes())
}

// answerError is an answer other than a 200 as an operator's error (Ask's
// and AskStream's).
func answerError(status int, body []byte) error {
	// The OpenAI error shape, whoever wrote it: the gateway or the engine.
	var out struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	msg := string(bytes.TrimSpace(body))
	if json.Unmarshal(body, &out) == nil && out.Error.Message != "" {
		msg = out.Error.Message
	}
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	said := fmt.Sprintf("the gateway answered %d %s: %s", status, http.StatusText(status), msg)
	switch {
	case status == http.StatusBadGateway:
		return operr.Wrap(operr.Unavailable, chat.ErrNoAnswer, "%s", said)
	case status == http.StatusServiceUnavailable && msg == chat.LoadingMessage:
		return operr.Wrap(operr.Unavailable, chat.ErrLoading, "%s", said)
	case status == http.StatusServiceUnavailable, status == http.StatusTooManyRequests:
		return operr.New(operr.Unavailable, "%s", said)
	}
	return operr.New(operr.Refused, "%s", said)
}

// recorder keeps an answer written for an in-process caller.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Flush()              {}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

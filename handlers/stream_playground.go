package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/a-h/templ"

	"modelserve/internal/chat"
	"modelserve/internal/gateway"
	"modelserve/internal/operr"
	"modelserve/internal/words"
	"modelserve/views"
)

// playgroundStream streams a reply to a message sent from the playground:
// an event named "reply" with the reply so far each time it grows (a few
// times a second at most), then one named "end" with the reply as it
// ended, its tokens per second, and the status line that announces it.
// The page's SSE extension closes the stream on "end". A stream whose
// message is not waiting (a reload, a reconnect after the connection
// dropped) ends at once saying so: the reply it was is gone, as the
// request to the engine went with the connection.
func (s *Server) playgroundStream(w http.ResponseWriter, r *http.Request, v visit) {
	name := r.PathValue("name")
	a, ok := s.asks.take(r.URL.Query().Get("ask"), v.user, name)
	if s.deps.Gateway == nil {
		ok = false
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	es := &eventWriter{w: w, rc: http.NewResponseController(w)}
	if !ok {
		gone := views.Reply{Done: true, Error: "this reply is no longer being written (the page was reloaded or the connection dropped): send the message again"}
		es.send(r.Context(), "end", views.ReplyEnd(gone, replyStatus(gone)))
		return
	}

	ctx, cancel := context.WithCancel(r.Context())
	meter := newReplyMeter(time.Now())
	grew := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- s.deps.Gateway.AskStream(ctx, chat.CompletionsPath, a.body, func(data []byte) error {
			err := meter.feed(data)
			select {
			case grew <- struct{}{}:
			default:
			}
			return err
		})
	}()
	// The request ends with the stream: a page closed mid-reply frees the
	// engine's slot.
	finished := false
	defer func() {
		cancel()
		if !finished {
			<-done
		}
	}()
	beat := time.NewTicker(s.events.heartbeat)
	defer beat.Stop()
	// Until the first token, the reply says whether it waits for the
	// model to load: "loading chatty…" while it starts.
	look := time.NewTicker(lookEvery)
	defer look.Stop()
	shown := s.loading(name)
	for {
		select {
		case <-look.C:
			waiting := meter.reply(false, "")
			if !waiting.Waiting {
				look.Stop()
				continue
			}
			if now := s.loading(name); now != shown {
				shown, waiting.Loading = now, now
				if es.send(r.Context(), "reply", views.ReplyView(waiting)) != nil {
					return
				}
			}
		case err := <-done:
			finished = true
			if r.Context().Err() != nil {
				return
			}
			reply := meter.reply(true, s.replyError(r, name, err))
			es.send(r.Context(), "end", views.ReplyEnd(reply, replyStatus(reply)))
			return
		case <-grew:
			if es.send(r.Context(), "reply", views.ReplyView(meter.reply(false, ""))) != nil {
				return
			}
			// Each event is the whole reply so far: a fast model writing
			// hundreds of tokens a second gets a few events a second, each
			// with what came since.
			select {
			case <-time.After(replyEvery):
			case <-ctx.Done():
			}
		case <-beat.C:
			// A model loaded on demand says nothing for a while; proxies
			// close a connection that is quiet for a minute.
			if es.comment(heartbeatComment) != nil {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// replyEvery is the least time between two events of a reply; lookEvery
// how often a reply waiting for its first token asks whether its model is
// loading.
const (
	replyEvery = 50 * time.Millisecond
	lookEvery  = 200 * time.Millisecond
)

// loading is model's name when it is not loaded (a message sent to it
// waits for it to start), else "".
func (s *Server) loading(model string) string {
	if s.deps.Gateway == nil || s.deps.Gateway.State(model) == gateway.Loaded {
		return ""
	}
	return model
}

// eventWriter writes server-sent events by hand: a reply's stream has one
// reader and one writer, and no snapshot to start again from, which is
// what the job streams' library is for.
type eventWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

// send writes c as an event named name, a data field per line (rendered
// HTML has newlines), and flushes it.
func (e *eventWriter) send(ctx context.Context, name string, c templ.Component) error {
	html, err := renderString(ctx, c)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	b.WriteString("event: " + name + "\n")
	for line := range strings.SplitSeq(lineEnds.Replace(string(html)), "\n") {
		b.WriteString("data: " + line + "\n")
	}
	b.WriteString("\n")
	if _, err := e.w.Write(b.Bytes()); err != nil {
		return err
	}
	return e.rc.Flush()
}

func (e *eventWriter) comment(text []byte) error {
	if _, err := fmt.Fprintf(e.w, ": %s\n\n", text); err != nil {
		return err
	}
	return e.rc.Flush()
}

// replyMeter reads a chat answer's chunks as they come: the text so far,
// when its first token came, and how many tokens it had.
type replyMeter struct {
	mu    sync.Mutex
	start time.Time
	first time.Time
	end   time.Time
	text  strings.Builder
	// chunks are the chunks that carried text: the tokens, when the
	// engine does not say its usage.
	chunks, completion int
}

func newReplyMeter(start time.Time) *replyMeter { return &replyMeter{start: start} }

// feed reads one chunk of a streamed answer, or a whole answer.
func (m *replyMeter) feed(data []byte) error {
	var c chat.Completion
	if err := json.Unmarshal(data, &c); err != nil {
		return operr.New(operr.Unavailable, "the model's answer was not a chat completion: %.200s", data)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ch := range c.Choices {
		part := ch.Delta.Content + ch.Message.Content
		if part == "" {
			continue
		}
		if m.first.IsZero() {
			m.first = time.Now()
		}
		m.text.WriteString(part)
		m.chunks++
	}
	if c.Usage != nil && c.Usage.CompletionTokens > 0 {
		m.completion = c.Usage.CompletionTokens
	}
	return nil
}

// reply is the reply so far; done once the answer has ended, with the
// error it ended on ("" for none).
func (m *replyMeter) reply(done bool, errText string) views.Reply {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := views.Reply{Text: m.text.String(), Waiting: m.first.IsZero(), Done: done, Error: errText}
	if !done || m.text.Len() == 0 {
		return r
	}
	if m.end.IsZero() {
		m.end = time.Now()
	}
	tokens := m.completion
	if tokens == 0 {
		tokens = m.chunks
	}
	// The wall clock, prompt included, as the job's smoke test counts it:
	// what a client waits for.
	took := m.end.Sub(m.start)
	r.Tokens = fmt.Sprintf("%s in %s", words.Count(tokens, "token", "tokens"), latencyText(took))
	if secs := took.Seconds(); secs > 0 {
		r.TokensPerSecond = formatFloat(float64(tokens) / secs)
	}
	r.FirstToken = latencyText(m.first.Sub(m.start))
	return r
}

// replyError is what the page says of err, a reply's end: "" for none.
func (s *Server) replyError(r *http.Request, model string, err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "the reply was stopped before its end"
	}
	if msg, ok := operr.Sentence(err); ok {
		return msg
	}
	s.deps.Log.Error("the playground's call to a model failed", "model", model, "path", r.URL.Path, "err", err)
	return genericError
}

// replyStatus is the status line for a reply that ended.
func replyStatus(r views.Reply) string {
	switch {
	case r.Error != "":
		return "The reply stopped: " + r.Error
	case r.TokensPerSecond != "":
		return "Reply done: " + r.Tokens + ", " + r.TokensPerSecond + " tokens per second."
	}
	return "Reply done, with no text."
}

// asks are messages sent from a playground whose replies have not begun to
// stream. The POST that sends a message cannot stream its reply (htmx
// swaps an answer whole), so the page opens the reply's event stream with
// a GET that names the message; the message waits here until then, for
// the user who sent it alone, once.
type asks struct {
	mu sync.Mutex
	m  map[string]pendingAsk
}

type pendingAsk struct {
	user, model string
	body        []byte
	at          time.Time
}

// askTTL is how long a message waits for its page to ask for the reply:
// the page does at once; a message left longer was sent by a page that
// went away.
const askTTL = time.Minute

// maxAsks bounds the messages waiting, so a script posting in a loop
// without reading the replies fills no memory.
const maxAsks = 256

func newAsks() *asks { return &asks{m: map[string]pendingAsk{}} }

// put keeps a and returns its id; false when too many are waiting.
func (q *asks) put(a pendingAsk) (string, bool) {
	now := time.Now()
	a.at = now
	q.mu.Lock()
	defer q.mu.Unlock()
	for id, old := range q.m {
		if now.Sub(old.at) > askTTL {
			delete(q.m, id)
		}
	}
	if len(q.m) >= maxAsks {
		return "", false
	}
	id := newToken()
	q.m[id] = a
	return id, true
}

// take removes and returns the message id, when user sent it to model and
// it has not waited too long.
func (q *asks) take(id, user, model string) (pendingAsk, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	a, ok := q.m[id]
	if !ok || a.user != user || a.model != model {
		return pendingAsk{}, false
	}
	delete(q.m, id)
	return a, time.Since(a.at) <= askTTL
}

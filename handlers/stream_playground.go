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
	"modelserve/internal/fleet"
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
		es.send(r.Context(), "end", s.replyEnd(r, name, gone))
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
	// Until the first token, the reply says what it waits for: room
	// other models hold, or the model to load ("loading chatty…").
	look := time.NewTicker(lookEvery)
	defer look.Stop()
	shown := s.waitFor(name)
	for {
		select {
		case <-look.C:
			waiting := meter.reply(false, "")
			if !waiting.Waiting {
				look.Stop()
				continue
			}
			if now := s.waitFor(name); now != shown {
				shown, waiting.Loading, waiting.Room = now, now.loading, now.room
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
			es.send(r.Context(), "end", s.replyEnd(r, name, reply))
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

// replyWait is what a reply waits for before its first token: loading is
// the model's name while it is not loaded, and room, then, what the fleet
// says it waits for while replicas of other models hold the room it needs
// ("on node local: waiting for gamma-1 to finish the requests it
// answers"). Both "" once it is loaded, when the reply waits for the
// engine alone.
type replyWait struct{ loading, room string }

// waitFor is what a message sent to model now waits for.
func (s *Server) waitFor(model string) replyWait {
	if s.deps.Gateway == nil || s.deps.Gateway.State(model) == gateway.Loaded {
		return replyWait{}
	}
	w := replyWait{loading: model}
	if h, ok := s.healthOf(model); ok && h.Ready == 0 {
		if rest, making := strings.CutPrefix(h.Placement, fleet.Making); making {
			// "on node vm: waiting: alpha-1 is kept 7s more …" follows
			// "Waiting for room" on the page: once is enough.
			rest = strings.Replace(rest, ": waiting: ", ": ", 1)
			w.room = strings.TrimSpace(s.deps.Mirror.ShownText(rest))
		}
	}
	return w
}

// replyEnd is a reply's last event: the reply, the status line, and how
// the model fares now that it has answered (it may have loaded it).
func (s *Server) replyEnd(r *http.Request, model string, reply views.Reply) templ.Component {
	st := views.PlaygroundState{Model: model}
	if m, err := s.deps.Catalog.Get(r.Context(), model); err == nil {
		st = s.playgroundState(m)
	}
	return views.ReplyEnd(reply, replyStatus(reply), st)
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
	// The time the model wrote, from its first token to its last: the
	// wait before the first (room given back, a cold start, the prompt)
	// is said on its own. Counted from the message, a reply of 8 tokens
	// after a 9 s wait for room read 0.9 tokens a second. A reply in one
	// chunk (the engine did not stream) has no such span: its rate is
	// over the whole call.
	from := m.first
	written := tokens - 1
	if m.chunks <= 1 {
		from, written = m.start, tokens
	}
	took := m.end.Sub(from)
	r.Tokens = fmt.Sprintf("%s in %s", words.Count(tokens, "token", "tokens"), latencyText(took))
	if secs := took.Seconds(); secs > 0 && written > 0 {
		r.TokensPerSecond = formatFloat(float64(written) / secs)
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
	case r.Tokens != "":
		return "Reply done: " + r.Tokens + "."
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

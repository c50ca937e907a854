package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"modelserve/catalog"
	"modelserve/internal/accesslog"
	"modelserve/internal/auth"
	"modelserve/internal/fleet"
)

// attempts is how many replicas a request is offered to when the ones
// before did not answer at all (refused the connection: an engine that
// just died). An answer begun is never sent twice.
const attempts = 3

// Forward answers POST /v1/...: the request goes, as the client sent it
// but for its model's name, to a replica of the model its body names (or
// of the model's canary, for its share of them), and the engine's answer
// comes back as the engine writes it.
func (g *Gateway) Forward(w http.ResponseWriter, r *http.Request) {
	// A request's place among those waiting is when it reached modelserve,
	// before its token was checked: requests that came in one order are
	// not put in another by how long each took to get this far.
	start, ok := accesslog.Arrived(r.Context())
	if !ok {
		start = time.Now() // wall time, as the access log's (Options.Clock)
	}
	who, aerr := g.authenticate(r)
	if aerr != nil {
		g.refuse(w, "", aerr)
		return
	}
	g.forward(w, r, who, false, start)
}

// forward is Forward for a caller already known to be who, whose request
// arrived at start; own says it is modelserve itself (Ask, AskStream),
// which may name a canary.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, who auth.Token, own bool, start time.Time) {
	body, err := readBody(http.MaxBytesReader(w, r.Body, g.opts.MaxBody), r.ContentLength, g.opts.MaxBody)
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			g.refuse(w, "", tooLarge(g.opts.MaxBody))
		} else {
			g.refuse(w, "", invalidRequest("unreadable_body", "the request body could not be read: "+err.Error()))
		}
		return
	}
	req, aerr := parseRequest(body)
	if aerr != nil {
		g.refuse(w, "", aerr)
		return
	}
	m, ok, err := g.names.lookup(r.Context(), req.model)
	if err != nil {
		g.log.Error("reading the catalog for a gateway request", "err", err)
		g.refuse(w, "", internal())
		return
	}
	// A canary is reached through its model, by its share: to a client
	// its name is unknown. modelserve's smoke test and evaluations name it
	// to ask the new version alone.
	if !ok || (m.Canary != nil && !own) {
		g.refuse(w, "", modelNotFound(req.model))
		return
	}
	if r2, span := g.startRequest(r, req.model); span != nil {
		defer span.End()
		r = r2
		g.recordContent(span, req)
	}
	if aerr := mayUse(who, req.model, m.Name); aerr != nil {
		g.refuse(w, m.Name, aerr)
		return
	}
	// What m does not serve is refused in the gateway's words (suits.go).
	if body, aerr = suit(r.URL.Path, m, &req, body); aerr != nil {
		g.refuse(w, m.Name, aerr)
		return
	}
	if c, ok := g.canaryFor(m); ok {
		if g.serve(w, r, c, req, body, start, m.Name) {
			return
		}
		// The canary did not take it (its replica did not answer, or had
		// no room): the model does, and the client never sees the
		// canary's fault, which is counted against the canary.
	}
	g.serve(w, r, m, req, body, start, "")
}

// serve sends the request to a replica of m, retrying on another while
// one does not answer at all, and relays the answer. answerAs, when set,
// is the model the client asked for, for which m is a canary standing in:
// the answer names answerAs, and where m cannot answer serve gives up
// (false, nothing written, the failure counted against m) so the model
// itself can. Else it always answers, and says true.
func (g *Gateway) serve(w http.ResponseWriter, r *http.Request, m catalog.Model, req request, body []byte, start time.Time, answerAs string) bool {
	ctx := r.Context()
	standIn := answerAs != ""
	if req.model != m.Name {
		// Asked by an alias, or by the model a canary stands in for: the
		// engine answers to the entry's name only (--alias), so that
		// alone of the body changes.
		var err error
		if body, err = req.renamed(m.Name); err != nil {
			g.refuse(w, m.Name, invalidRequest("invalid_json", "the request body is not a JSON object: "+err.Error()))
			return true
		}
	}
	var rn *renamer
	if standIn {
		rn = newRenamer(m.Name, answerAs)
	}

	p := g.pool(m.Name)
	rs := p.read()
	// With none ready, the request may wait for a start: the replicas
	// last given back are read before the demand is said, since the fleet
	// may give one back for it at once (a swap's span names them).
	var stops map[string]string
	if len(rs) == 0 {
		stops = g.lastStops(ctx)
	}
	// The fleet orders the models waiting for room by when their
	// requests came, and holds replicas by it too: it is told when this
	// one came, not when it got this far.
	release := g.opts.Fleet.Use(m.Name, wanted(p, rs), start)
	defer release()
	// A replica that did not answer at all (refused the connection, or
	// closed it before a byte of the answer: an engine that just died or
	// was retired) is not offered the request again while another is;
	// else the request waits for one, as a first request waits for a cold
	// start (admit says how long before it tries the same one again).
	var tried []fleet.Replica
	var wait waitTrace
	var place uint64 // in the queue, kept from one attempt to the next
	for range attempts {
		rep, s, aerr := g.admit(ctx, m, start, req.affinity, tried, &place, standIn, g.startWait(&wait, ctx, m.Name, tried, standIn, stops))
		if aerr != nil {
			switch {
			case ctx.Err() != nil:
				g.ended(ending{model: m.Name, status: statusClientGone})
				return true
			case standIn:
				g.log.Warn("a canary could not take a request; its model does", "canary", m.Name, "model", answerAs, "why", aerr.Message)
				g.ended(ending{model: m.Name, status: aerr.status})
				return false
			case len(tried) > 0:
				// Counted already, as the replica's 502.
				badGateway("the replica " + tried[len(tried)-1].ID + " of " + m.Name + " did not answer, and no other became ready: " +
					aerr.Message).write(w)
				return true
			}
			g.refuse(w, m.Name, aerr)
			return true
		}
		answered := g.send(w, r, m, rep, &s, body, start, rn)
		s.done()
		if answered {
			return true
		}
		tried = append(tried, rep)
		rs = p.read()
		if standIn && len(without(rs, tried)) == 0 {
			// A canary with no other replica ready gives the request to
			// its model at once rather than wait for one of its own.
			break
		}
	}
	if standIn {
		return false
	}
	// Counted already, as the replica's 502.
	badGateway("the replica " + tried[len(tried)-1].ID + " of " + m.Name + " did not answer: the fleet page says why; retry in a moment").write(w)
	return true
}

// statusClientGone is the status counted for a request whose client went
// away before the answer ended (nginx's 499): neither the engine's fault
// nor the client's error.
const statusClientGone = 499

// send offers the request to replica rep, on its slot s, and relays its
// answer, naming the model rn says when rn is set. The slot's turn goes
// once the request is written to the engine. It says false when the
// engine did not answer at all and the request may go to another replica;
// then nothing has been written.
func (g *Gateway) send(w http.ResponseWriter, r *http.Request, m catalog.Model, rep fleet.Replica, s *slot, body []byte, start time.Time, rn *renamer) bool {
	p := g.pool(m.Name)
	ctx := r.Context()
	host, ok := hostOf(rep.Endpoint)
	if !ok {
		s.sent()
		p.give(rep.ID, time.Time{})
		g.log.Error("a replica's endpoint is not an http:// address", "replica", rep.ID, "endpoint", rep.Endpoint)
		g.refuse(w, m.Name, internal())
		return true
	}
	target := r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	// Only what the engine needs of the client's headers: its key is
	// modelserve's, never the client's token, nor the client's cookies.
	up := engineRequest{host: host, target: target, key: g.opts.Fleet.EngineKey(rep.ID), body: body, wrote: s.sent}
	if a := r.Header["Accept"]; len(a) > 0 && headerValue(a[0]) {
		up.accept = a[0]
	}
	var call callTrace
	if g.opts.Tracer != nil {
		// The trace context is written into a header of its own, made
		// only for a traced request; the span's path is the client's.
		up.header = http.Header{}
		call = g.startCall(ctx, r.URL.Path, up.header, m.Name, rep, rn.answering())
	}
	if call.on() {
		defer func() { call.end(ctx, http.StatusBadGateway, start, time.Time{}, counts{}) }()
	}

	// The engine's latency is wall time (Options.Clock).
	sentAt := time.Now()
	resp, err := g.engines.do(ctx, &up)
	if err != nil {
		if ctx.Err() != nil {
			p.give(rep.ID, time.Time{})
			g.ended(ending{model: m.Name, replica: rep.ID, status: statusClientGone, start: start})
			return true
		}
		p.give(rep.ID, g.clock.Now().Add(g.opts.FailCooldown))
		g.log.WarnContext(ctx, "a replica did not answer; it is avoided for a while", "model", m.Name, "replica", rep.ID, "err", err)
		g.ended(ending{model: m.Name, replica: rep.ID, status: http.StatusBadGateway, start: start})
		return false
	}
	defer resp.Body.Close()
	// A prompt longer than the slot's context is refused in the gateway's
	// words, naming the model the client asked for (exceeded.go).
	asked := m.Name
	if a := rn.answering(); a != "" {
		asked = a
	}
	contextExceeded(resp, asked, r.URL.Path)

	timing := serverTiming(sentAt.Sub(start), time.Since(sentAt))
	first, tally, err := relay(w, resp, rn, call.on() && g.opts.TraceContent, timing)
	if err == nil && tally.stream && !tally.done && resp.StatusCode == http.StatusOK && endsInDone[r.URL.Path] {
		// An engine killed mid-stream may end the body as if it were
		// done: only the missing [DONE] tells.
		err = errors.New("the stream ended without its closing [DONE]")
	}
	// The whole answer went out, or the whole of a stream: a client that
	// closes its connection then (the OpenAI clients do, after a stream's
	// [DONE] or beyond the connections they keep) cancels the request,
	// but had its answer.
	complete := err == nil || tally.done
	var failedUntil time.Time
	status := resp.StatusCode
	switch {
	case !complete && (ctx.Err() != nil || errors.Is(err, errClientGone)):
		status = statusClientGone
	case !complete:
		// The engine broke off its answer: the client has a truncated
		// one, counted as the engine's failure (though its status went
		// out as 200), and the next requests go elsewhere for a while.
		status = http.StatusBadGateway
		failedUntil = g.clock.Now().Add(g.opts.FailCooldown)
		g.log.WarnContext(ctx, "a replica broke off its answer; it is avoided for a while", "model", m.Name, "replica", rep.ID, "err", err)
		if tally.stream {
			// The 200 has gone out: the client learns of the failure
			// from an error event, as llama.cpp sends one, which the
			// OpenAI clients raise; else the stream's end would read as
			// a whole answer.
			streamError(w, badGateway("the replica "+rep.ID+" of "+m.Name+
				" broke off its answer before the end: retry; the fleet page says whether it is still ready"))
		}
	case resp.StatusCode >= 500 && failedStatus(resp.StatusCode): // not a 501: stats.go
		failedUntil = g.clock.Now().Add(g.opts.FailCooldown)
		g.log.WarnContext(ctx, "a replica failed a request; it is avoided for a while", "model", m.Name, "replica", rep.ID, "status", resp.StatusCode)
	}
	p.give(rep.ID, failedUntil)
	c := tally.counts()
	if call.on() && g.opts.TraceContent {
		recordAnswer(ctx, tally.answerText())
	}
	call.end(ctx, status, start, first, c)
	g.ended(ending{model: m.Name, replica: rep.ID, status: status, start: start, first: first, end: time.Now(),
		stream: tally.stream, counts: c})
	return true
}

// endsInDone are the routes whose event stream the engine closes with
// "data: [DONE]" (OpenAI's chat and text completions).
var endsInDone = map[string]bool{"/v1/chat/completions": true, "/v1/completions": true}

// streamError writes aerr as an event of a stream already begun, in
// OpenAI's error shape. The blank lines first end an event the engine
// broke off in the middle, so the error is an event of its own.
func streamError(w http.ResponseWriter, aerr *apiError) {
	b, _ := json.Marshal(struct {
		Error *apiError `json:"error"`
	}{aerr})
	if _, err := w.Write(append(append([]byte("\n\ndata: "), b...), "\n\n"...)); err == nil {
		_ = http.NewResponseController(w).Flush()
	}
}

// refuse answers with aerr and counts it.
func (g *Gateway) refuse(w http.ResponseWriter, model string, aerr *apiError) {
	aerr.write(w)
	g.ended(ending{model: model, status: aerr.status})
}

// serverTiming is the Server-Timing header (W3C Server Timing) of an
// answer relayed from an engine: how long the request waited in
// modelserve before it was sent to a replica (its queue, a cold start or
// a swap, from its arrival), and how long the engine took to
// begin its answer (the whole answer for a plain request, the first
// event for a stream). A client, or a browser's tools, sees where the
// time went without a trace.
func serverTiming(wait, engine time.Duration) string {
	return fmt.Sprintf(`wait;dur=%.2f;desc="waiting for a replica", engine;dur=%.2f;desc="the engine, to its answer"`,
		float64(wait)/float64(time.Millisecond), float64(engine)/float64(time.Millisecond))
}

// hopHeaders are the headers of one connection, not of the answer (RFC
// 9110 section 7.6.1): they are not relayed.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// relay writes the engine's answer to the client as it arrives: an event
// stream is flushed after every read, so each event reaches the client as
// the engine wrote it. With rn, the model the answer names is rewritten
// on the way. It returns when the first bytes of the body were written
// (time to first token, for a stream) and the answer's token counts (and
// a stream's text, with keepText), and an error when the engine broke off
// or the client went away (errClientGone). timing, unless "", is the
// gateway's Server-Timing, added after any the engine sent.
func relay(w http.ResponseWriter, resp *http.Response, rn *renamer, keepText bool, timing string) (first time.Time, t tally, err error) {
	for k, vs := range resp.Header {
		if !hopHeaders[k] {
			// Capped, so that adding to it (Server-Timing) copies rather
			// than writes into the engine's answer's own array.
			w.Header()[k] = vs[:len(vs):len(vs)]
		}
	}
	if timing != "" {
		w.Header().Add("Server-Timing", timing)
	}
	if rn != nil {
		// The renamed body is not the length the engine said.
		w.Header().Del("Content-Length")
	}
	w.WriteHeader(resp.StatusCode)
	t.stream, t.keepText = isEventStream(resp.Header.Get("Content-Type")), keepText
	if !t.stream && resp.ContentLength > 0 && resp.ContentLength <= maxTallied {
		// The answer is kept to read its counts: in one buffer of its
		// length, not grown as it arrives.
		t.body = make([]byte, 0, resp.ContentLength)
	}
	rc := http.NewResponseController(w)
	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	buf := *bp
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if first.IsZero() {
				first = time.Now() // wall time, as sentAt's
			}
			out := buf[:n]
			if rn != nil {
				out = rn.next(out)
			}
			if _, werr := w.Write(out); werr != nil {
				return first, t, fmt.Errorf("%w: %w", errClientGone, werr)
			}
			if t.stream {
				if ferr := rc.Flush(); ferr != nil {
					return first, t, fmt.Errorf("%w: %w", errClientGone, ferr)
				}
			}
			t.feed(buf[:n])
		}
		if rerr == io.EOF {
			if rn != nil {
				if _, werr := w.Write(rn.rest()); werr != nil {
					return first, t, fmt.Errorf("%w: %w", errClientGone, werr)
				}
			}
			// The whole answer to the client now, before the gateway
			// counts its tokens: a small plain answer would otherwise
			// wait in the writer's buffer for the handler to return.
			if ferr := rc.Flush(); ferr != nil && !errors.Is(ferr, http.ErrNotSupported) {
				return first, t, fmt.Errorf("%w: %w", errClientGone, ferr)
			}
			return first, t, nil
		}
		if rerr != nil {
			return first, t, rerr
		}
	}
}

// relayBufs are relay's read buffers, kept from one answer to the next:
// 32 KiB made afresh for every request was most of what a request
// allocated.
var relayBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// errClientGone is relay's error when writing to the client failed: the
// client went away, which is no fault of the engine's.
var errClientGone = errors.New("the client went away")

func isEventStream(contentType string) bool {
	return len(contentType) >= 17 && contentType[:17] == "text/event-stream"
}

// readBody reads a request's body whole: into one buffer of its length
// when the client said it (as the official clients do) and it is within
// max, else growing as it comes. io.ReadAll began at 512 bytes and grew
// by copying: a 16 KiB prompt was read into seven buffers in turn.
func readBody(body io.Reader, length, max int64) ([]byte, error) {
	if length <= 0 || length > max {
		return io.ReadAll(body)
	}
	b := make([]byte, length)
	if _, err := io.ReadFull(body, b); err != nil {
		return nil, err
	}
	return b, nil
}

// request is what the gateway reads of a request body.
type request struct {
	fields map[string]json.RawMessage
	model  string
	// affinity is the hash of the prompt's beginning; 0 for none.
	affinity uint64
}

// affinityBytes is how much of a prompt's beginning chooses its replica:
// enough to tell apart system prompts and conversations, and the same for
// every turn of one conversation.
const affinityBytes = 4096

// parseRequest reads the body's model, and the beginning of its prompt
// for prefix affinity: the system prompt or instructions when there are
// any, else the first message, else the prompt. Those stay the same from
// one turn of a conversation to the next, where the whole would not.
func parseRequest(body []byte) (request, *apiError) {
	var req request
	var ok bool
	if req.fields, ok = members(body); !ok {
		return req, invalidRequest("invalid_json", "the request body is not a JSON object: send the request as JSON, with a model")
	}
	raw, ok := req.fields["model"]
	if !ok {
		return req, invalidRequest("missing_model", `the request names no model: set "model" to one GET /v1/models lists`)
	}
	if req.model, ok = jsonString(raw); !ok || req.model == "" {
		return req, invalidRequest("invalid_model", `"model" is not a model's name: set it to one GET /v1/models lists`)
	}
	var prefix []byte
	for _, k := range []string{"system", "instructions"} {
		prefix = append(prefix, req.fields[k]...)
	}
	if msgs := req.fields["messages"]; len(prefix) == 0 && len(msgs) > 0 && msgs[0] == '[' {
		if i := skipSpace(msgs, 1); msgs[i] != ']' {
			prefix = msgs[i:scanValue(msgs, i, 1)] // valid: members checked it
		}
	}
	if len(prefix) == 0 {
		prefix = req.fields["prompt"]
	}
	if len(prefix) > 0 {
		req.affinity = max(fnv1a(prefix[:min(len(prefix), affinityBytes)]), 1)
	}
	return req, nil
}

// renamed is the body with its model set to name, every other field as it
// came.
func (req request) renamed(name string) ([]byte, error) {
	req.fields["model"] = json.RawMessage(strconv.Quote(name))
	return json.Marshal(req.fields)
}

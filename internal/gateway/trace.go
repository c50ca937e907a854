package gateway

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"modelserve/internal/fleet"
	tracing "modelserve/internal/trace"
)

// A gateway request is a trace: it continues the caller's traceparent,
// with spans for the wait for a replica to start (a cold start or a
// swap), the wait in the queue, the routing decision, and each call to an
// engine, which is passed the trace on. Attributes follow OpenTelemetry's
// GenAI conventions; the prompt and the answer are recorded only when the
// operator asks (--trace-content).

func (g *Gateway) tracer() trace.Tracer { return tracing.Or(g.opts.Tracer) }

func (g *Gateway) propagator() propagation.TextMapPropagator {
	if g.opts.Propagator == nil {
		return propagation.TraceContext{}
	}
	return g.opts.Propagator
}

// Every span option and attribute set is paid for on the request's path:
// the kinds are made once, and each span's attributes are given in one
// call (each call is an allocation, and every one but the first may grow
// the span's list again).
var (
	serverKind = trace.WithSpanKind(trace.SpanKindServer)
	clientKind = trace.WithSpanKind(trace.SpanKindClient)
)

// attrList is a list lent to give a span its attributes in: the tracer
// copies what it is given, and a list made for every call was an
// allocation of each span. It holds the most any span of a request is
// given at once (the routing decision's, at most 8).
type attrList [8]attribute.KeyValue

var attrLists = sync.Pool{New: func() any { return new(attrList) }}

// setAttrs gives span the attributes a, in a list lent by attrLists, and
// gives the list back.
func setAttrs(span trace.Span, l *attrList, a []attribute.KeyValue) {
	span.SetAttributes(a...)
	clear(l[:])
	attrLists.Put(l)
}

// lendAttrs is an empty list of attrLists', to be given back by setAttrs.
func lendAttrs() (*attrList, []attribute.KeyValue) {
	l := attrLists.Get().(*attrList)
	return l, l[:0]
}

// operationOf is the GenAI operation a route is.
func operationOf(path string) string {
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		return "chat"
	case strings.HasSuffix(path, "/embeddings"):
		return "embeddings"
	case strings.HasSuffix(path, "/completions"):
		return "text_completion"
	}
	return "other"
}

// startRequest begins the request's server span, continuing the caller's
// trace when it sent one.
func (g *Gateway) startRequest(r *http.Request, model string) (*http.Request, trace.Span) {
	if g.opts.Tracer == nil {
		return r, nil
	}
	ctx := g.propagator().Extract(r.Context(), headerCarrier(r.Header))
	op := operationOf(r.URL.Path)
	ctx, span := g.tracer().Start(ctx, g.spanNames.of(op, model), serverKind)
	l, a := lendAttrs()
	setAttrs(span, l, append(a, attribute.String("gen_ai.operation.name", op), attribute.String("gen_ai.request.model", model),
		attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
	return r.WithContext(ctx), span
}

// spanNames are the names of requests' spans ("chat tiny"), made once
// for each operation and model asked, rather than for every request.
// Only names the catalog knows reach it; it starts again should it ever
// hold maxSpanNames (names of models long removed).
type spanNames struct {
	mu    sync.RWMutex
	names map[[2]string]string
}

const maxSpanNames = 1024

// of is the name of the span of a request for operation op of model.
func (n *spanNames) of(op, model string) string {
	n.mu.RLock()
	name, ok := n.names[[2]string{op, model}]
	n.mu.RUnlock()
	if ok {
		return name
	}
	name = op + " " + model
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.names == nil || len(n.names) >= maxSpanNames {
		n.names = map[[2]string]string{}
	}
	n.names[[2]string{op, model}] = name
	return name
}

// waitTrace records, as spans of the request, how it came by a replica:
// the wait for one to start (a cold start, or a swap when others were
// given back to make its room), the wait in the queue for a free slot,
// and the routing decision, with why. A nil *waitTrace (tracing off)
// records nothing, at no cost.
type waitTrace struct {
	g       *Gateway
	ctx     context.Context
	model   string
	standIn bool
	tried   []string
	// When the waits now going on began, the wait for a start and the
	// wait for a slot: each is recorded once over, as a span begun then
	// and ended now, so that no span is held open while it waits.
	coldAt, queuedAt time.Time
	// ahead and ready are said by the queue's span: the requests before
	// this one when it began waiting, and the replicas ready then.
	ahead, ready int
	// stops are the models' last replicas given back when the request
	// said its demand, read when none was ready then, else as it began
	// to wait for a start (lastStops): one said after names the replica
	// given back for this model.
	stops map[string]string
}

// lastStops is, by model, the last of its replicas given back
// (fleet.ModelHealth's LastStop), read when the request is traced: a
// start's wait tells a swap from a cold start by what changed since.
func (g *Gateway) lastStops(ctx context.Context) map[string]string {
	if g.opts.Tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return nil
	}
	stops := map[string]string{}
	for _, h := range g.opts.Fleet.ModelHealth() {
		stops[h.Model] = h.LastStop
	}
	return stops
}

// startWait begins, in w, the trace of the wait for a replica of model,
// by a request that replicas tried already failed; stops are lastStops as
// the request said its demand, nil when replicas were ready then. The
// caller gives w (one on its stack, not an allocation a request); nil
// when the request is not traced.
func (g *Gateway) startWait(w *waitTrace, ctx context.Context, model string, tried []fleet.Replica, standIn bool, stops map[string]string) *waitTrace {
	if g.opts.Tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return nil
	}
	*w = waitTrace{g: g, ctx: ctx, model: model, standIn: standIn, stops: stops}
	for _, t := range tried {
		w.tried = append(w.tried, t.ID)
	}
	return w
}

// explain is whether the routing decision is to say every candidate's load.
func (w *waitTrace) explain() bool { return w != nil }

// cold says the request waits for a replica to start: none is ready.
func (w *waitTrace) cold() {
	if w == nil || !w.coldAt.IsZero() {
		return
	}
	if w.stops == nil {
		// Replicas were ready as the request came, and are gone now.
		w.stops = w.g.lastStops(w.ctx)
	}
	w.coldAt = time.Now() // a span's times are wall time (Options.Clock)
}

// started ends the wait for a start, a cold start or a swap: the replicas
// given back for this model since it began tell them apart.
func (w *waitTrace) started(aerr *apiError) {
	if w == nil || w.coldAt.IsZero() {
		return
	}
	var given []string
	for _, h := range w.g.opts.Fleet.ModelHealth() {
		if h.LastStop != "" && h.LastStop != w.stops[h.Model] && stoppedFor(h.LastStop, w.model) {
			given = append(given, h.LastStop)
		}
	}
	name, kind := "cold start", "cold_start"
	l, attrs := lendAttrs()
	attrs = append(attrs, attribute.String("modelserve.model", w.model), attribute.Bool("modelserve.canary", w.standIn))
	if len(given) > 0 {
		name, kind = "swap", "swap"
		attrs = append(attrs, attribute.StringSlice("modelserve.given_back", given))
	}
	w.record(name, w.coldAt, aerr, l, append(attrs, attribute.String("modelserve.start", kind)))
	w.coldAt = time.Time{}
}

// record is a span of the request's, begun at began and ended now, with
// the attributes attrs, in l (lendAttrs').
func (w *waitTrace) record(name string, began time.Time, aerr *apiError, l *attrList, attrs []attribute.KeyValue) {
	_, span := w.g.tracer().Start(w.ctx, name, trace.WithTimestamp(began))
	setAttrs(span, l, attrs)
	if aerr != nil {
		span.SetStatus(codes.Error, aerr.Message)
	}
	span.End()
}

// endQueue records the wait for a slot, if there was one.
func (w *waitTrace) endQueue(aerr *apiError) {
	if w.queuedAt.IsZero() {
		return
	}
	l, attrs := lendAttrs()
	w.record("queue", w.queuedAt, aerr, l, append(attrs, attribute.String("modelserve.model", w.model),
		attribute.Int("modelserve.queue.ahead", w.ahead), attribute.Int("modelserve.replicas_ready", w.ready)))
	w.queuedAt = time.Time{}
}

// stoppedFor is whether a fleet's sentence of a replica given back
// ("chatty-1: given back for tiny, idle for 4 min"; "stopped to make room
// for tiny, a critical model") names model as the one it made room for.
func stoppedFor(stop, model string) bool {
	for rest := stop; ; {
		i := strings.Index(rest, " for "+model)
		if i < 0 {
			return false
		}
		rest = rest[i+len(" for "+model):]
		if rest == "" || rest[0] == ',' || rest[0] == ' ' {
			return true
		}
	}
}

// queued says the request waits for a slot, ahead of it those waiting
// already.
func (w *waitTrace) queued(ahead, ready int) {
	if w == nil || !w.queuedAt.IsZero() {
		return
	}
	w.started(nil)
	w.queuedAt, w.ahead, w.ready = time.Now(), ahead, ready // wall time, as coldAt
}

// routed ends the waits, and records the routing decision: which replica
// took the request, why, and what else there was.
func (w *waitTrace) routed(c choice, ready int) {
	if w == nil {
		return
	}
	w.started(nil)
	w.endQueue(nil)
	// What the request's span says already (the model) is not said
	// again: every attribute is paid for on the request's path and again
	// in the export.
	l, attrs := lendAttrs()
	attrs = append(attrs, attribute.String("modelserve.replica", c.replica.ID), attribute.String("modelserve.node", c.replica.Node),
		attribute.String("modelserve.route.why", c.why), attribute.Int("modelserve.route.load", c.load),
		attribute.Int("modelserve.replicas_ready", ready),
		// One string, not a slice: a slice attribute is made by
		// reflection, and was a third of the routing span's cost.
		attribute.String("modelserve.route.candidates", strings.Join(c.loads, ", ")))
	if avoided := append(slices.Clip(w.tried), c.cooling...); len(avoided) > 0 {
		attrs = append(attrs, attribute.StringSlice("modelserve.avoided_replicas", avoided))
	}
	if w.standIn {
		attrs = append(attrs, attribute.Bool("modelserve.canary", true))
	}
	_, span := w.g.tracer().Start(w.ctx, "route")
	setAttrs(span, l, attrs)
	span.End()
}

// failed ends the waits: no replica took the request, for aerr's reason.
func (w *waitTrace) failed(aerr *apiError) {
	if w == nil {
		return
	}
	w.started(aerr)
	w.endQueue(aerr)
}

// callTrace is the client span of a call to an engine, and what it says
// of the call: all of it is set as the call ends, in one list, since each
// further list given a span may copy its attributes again. The zero
// callTrace (tracing off) records nothing.
type callTrace struct {
	span                    trace.Span
	replica, node, endpoint string
	// model is the one that answers; canary, when it is a canary, the
	// model it answers for.
	model, canary string
	// trial is whether an update of the model is on trial: its canary
	// or the model itself answers, and the span says which version.
	trial bool
}

// on is whether the call is traced.
func (c *callTrace) on() bool { return c.span != nil }

// startCall begins the client span of the call to an engine of model on
// path, and passes the trace on in header; answerAs, when model is a
// canary, is the model it answers for. While model has a canary, the
// old version's calls say so too: a trace read during a trial names the
// version that answered, whichever it was.
func (g *Gateway) startCall(ctx context.Context, path string, header http.Header, model string, rep fleet.Replica, answerAs string) callTrace {
	if g.opts.Tracer == nil {
		return callTrace{}
	}
	ctx, span := g.tracer().Start(ctx, engineSpanName(path), clientKind)
	if _, w3c := g.propagator().(propagation.TraceContext); w3c {
		setTraceContext(header, span.SpanContext())
	} else {
		g.propagator().Inject(ctx, headerCarrier(header))
	}
	trial := answerAs != ""
	if !trial {
		_, trial = g.names.canary(model)
	}
	return callTrace{span: span, replica: rep.ID, node: rep.Node, endpoint: rep.Endpoint, model: model, canary: answerAs, trial: trial}
}

// engineSpanName is the name of the span of a call to an engine on path,
// made once for each operation.
func engineSpanName(path string) string {
	switch operationOf(path) {
	case "chat":
		return "engine chat"
	case "embeddings":
		return "engine embeddings"
	case "text_completion":
		return "engine text_completion"
	}
	return "engine other"
}

// setTraceContext writes sc into h as the W3C trace context, as
// propagation.TraceContext's Inject does, but straight into the header:
// the propagator's string builder and carrier are its cost a request.
func setTraceContext(h http.Header, sc trace.SpanContext) {
	if !sc.IsValid() {
		return
	}
	if ts := sc.TraceState().String(); ts != "" {
		h["Tracestate"] = []string{ts}
	}
	// version-traceid-spanid-flags: 00-<32 hex>-<16 hex>-<2 hex>.
	var b [55]byte
	tid, sid, flags := sc.TraceID(), sc.SpanID(), [1]byte{byte(sc.TraceFlags() & trace.FlagsSampled)}
	b[0], b[1], b[2], b[35], b[52] = '0', '0', '-', '-', '-'
	hex.Encode(b[3:35], tid[:])
	hex.Encode(b[36:52], sid[:])
	hex.Encode(b[53:], flags[:])
	h["Traceparent"] = []string{string(b[:])}
}

// headerCarrier is propagation.HeaderCarrier but that it reads and sets
// the W3C trace context's headers by their canonical names, made once,
// rather than canonicalising them (an allocation) for every request.
type headerCarrier http.Header

func (h headerCarrier) Get(key string) string {
	var vs []string
	switch key {
	case "traceparent":
		vs = h["Traceparent"]
	case "tracestate":
		vs = h["Tracestate"]
	default:
		return propagation.HeaderCarrier(h).Get(key)
	}
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

func (h headerCarrier) Keys() []string { return propagation.HeaderCarrier(h).Keys() }
func (h headerCarrier) Set(key, value string) {
	switch key {
	case "traceparent":
		h["Traceparent"] = []string{value}
	case "tracestate":
		h["Tracestate"] = []string{value}
	default:
		http.Header(h).Set(key, value)
	}
}

// end ends the engine's span with its status, and tells the request's
// span (ctx's) what the engine answered: the GenAI operation's figures
// are the request's, said once. Ended, c records nothing more.
func (c *callTrace) end(ctx context.Context, status int, start, first time.Time, n counts) {
	if c.span == nil {
		return
	}
	l, attrs := lendAttrs()
	attrs = append(attrs, attribute.String("modelserve.replica", c.replica), attribute.String("modelserve.node", c.node),
		// The path is the request's, on its span (the parent).
		attribute.String("server.address", c.endpoint), attribute.Int("http.response.status_code", status))
	if c.trial {
		attrs = append(attrs, attribute.String("modelserve.version", c.model))
	}
	if c.canary != "" {
		attrs = append(attrs, attribute.String("modelserve.canary_of", c.canary))
	}
	setAttrs(c.span, l, attrs)
	if status >= 500 {
		c.span.SetStatus(codes.Error, http.StatusText(status))
	}
	c.span.End()
	c.span = nil
	if req := trace.SpanFromContext(ctx); req.IsRecording() {
		l, attrs := lendAttrs()
		attrs = append(attrs, attribute.Int("http.response.status_code", status), attribute.String("gen_ai.response.model", c.model),
			attribute.Int("gen_ai.usage.input_tokens", n.prompt), attribute.Int("gen_ai.usage.output_tokens", n.completion),
			attribute.Int("modelserve.timings.cache_n", n.cached))
		if !first.IsZero() {
			attrs = append(attrs, attribute.Float64("gen_ai.server.time_to_first_token", first.Sub(start).Seconds()))
		}
		setAttrs(req, l, attrs)
	}
}

// answering is the model a canary stands in for, "" when rn is nil.
func (rn *renamer) answering() string {
	if rn == nil {
		return ""
	}
	s, err := strconv.Unquote(strings.TrimPrefix(string(rn.to), `"model":`))
	if err != nil {
		return ""
	}
	return s
}

// recordAnswer puts the answer's text on the request's span (ctx's), as
// the GenAI conventions' output message, when the operator asked for
// content (--trace-content).
func recordAnswer(ctx context.Context, text string) {
	if text == "" {
		return
	}
	b, _ := json.Marshal([]map[string]any{{"role": "assistant", "parts": []map[string]string{{"type": "text", "content": text}}}})
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("gen_ai.output.messages", string(b)))
}

// maxTracedContent bounds the text --trace-content puts on a span.
const maxTracedContent = 16 << 10

// recordContent puts the request's messages, prompt or input on its span,
// when the operator asked for it, cut to maxTracedContent.
func (g *Gateway) recordContent(span trace.Span, req request) {
	if !g.opts.TraceContent {
		return
	}
	for _, f := range []string{"messages", "prompt", "input"} {
		if raw, ok := req.fields[f]; ok {
			if len(raw) > maxTracedContent {
				raw = raw[:maxTracedContent]
			}
			span.SetAttributes(attribute.String("gen_ai.input.messages", string(raw)))
			return
		}
	}
}

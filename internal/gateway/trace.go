package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
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
	ctx := g.propagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	op := operationOf(r.URL.Path)
	ctx, span := g.tracer().Start(ctx, op+" "+model, serverKind)
	span.SetAttributes(attribute.String("gen_ai.operation.name", op), attribute.String("gen_ai.request.model", model),
		attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path))
	return r.WithContext(ctx), span
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

// startWait begins the trace of the wait for a replica of model, by a
// request that replicas tried already failed; stops are lastStops as the
// request said its demand, nil when replicas were ready then.
func (g *Gateway) startWait(ctx context.Context, model string, tried []fleet.Replica, standIn bool, stops map[string]string) *waitTrace {
	if g.opts.Tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return nil
	}
	w := &waitTrace{g: g, ctx: ctx, model: model, standIn: standIn, stops: stops}
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
	w.coldAt = time.Now()
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
	attrs := []attribute.KeyValue{attribute.String("modelserve.model", w.model), attribute.Bool("modelserve.canary", w.standIn)}
	if len(given) > 0 {
		name, kind = "swap", "swap"
		attrs = append(attrs, attribute.StringSlice("modelserve.given_back", given))
	}
	w.record(name, w.coldAt, aerr, append(attrs, attribute.String("modelserve.start", kind))...)
	w.coldAt = time.Time{}
}

// record is a span of the request's, begun at began and ended now.
func (w *waitTrace) record(name string, began time.Time, aerr *apiError, attrs ...attribute.KeyValue) {
	_, span := w.g.tracer().Start(w.ctx, name, trace.WithTimestamp(began))
	span.SetAttributes(attrs...)
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
	w.record("queue", w.queuedAt, aerr, attribute.String("modelserve.model", w.model),
		attribute.Int("modelserve.queue.ahead", w.ahead), attribute.Int("modelserve.replicas_ready", w.ready))
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
	w.queuedAt, w.ahead, w.ready = time.Now(), ahead, ready
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
	attrs := make([]attribute.KeyValue, 6, 8)
	attrs[0], attrs[1] = attribute.String("modelserve.replica", c.replica.ID), attribute.String("modelserve.node", c.replica.Node)
	attrs[2], attrs[3] = attribute.String("modelserve.route.why", c.why), attribute.Int("modelserve.route.load", c.load)
	attrs[4] = attribute.Int("modelserve.replicas_ready", ready)
	// One string, not a slice: a slice attribute is made by reflection,
	// and was a third of the routing span's cost.
	attrs[5] = attribute.String("modelserve.route.candidates", strings.Join(c.loads, ", "))
	if avoided := append(slices.Clip(w.tried), c.cooling...); len(avoided) > 0 {
		attrs = append(attrs, attribute.StringSlice("modelserve.avoided_replicas", avoided))
	}
	if w.standIn {
		attrs = append(attrs, attribute.Bool("modelserve.canary", true))
	}
	_, span := w.g.tracer().Start(w.ctx, "route")
	span.SetAttributes(attrs...)
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

// startCall begins the client span of the call to an engine, and passes
// the trace on in up's headers.
func (g *Gateway) startCall(ctx context.Context, up *http.Request, model string, rep fleet.Replica, answerAs string) (context.Context, trace.Span) {
	if g.opts.Tracer == nil {
		return ctx, nil
	}
	ctx, span := g.tracer().Start(ctx, engineSpanName(up.URL.Path), clientKind)
	attrs := make([]attribute.KeyValue, 4, 6)
	attrs[0], attrs[1] = attribute.String("modelserve.replica", rep.ID), attribute.String("modelserve.node", rep.Node)
	attrs[2], attrs[3] = attribute.String("server.address", rep.Endpoint), attribute.String("url.path", up.URL.Path)
	if answerAs != "" {
		attrs = append(attrs, attribute.String("modelserve.version", model), attribute.String("modelserve.canary_of", answerAs))
	}
	span.SetAttributes(attrs...)
	g.propagator().Inject(ctx, headerCarrier(up.Header))
	return ctx, span
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

// headerCarrier is propagation.HeaderCarrier but that it sets the W3C
// trace context's headers by their canonical names, made once, rather
// than canonicalising them for every request.
type headerCarrier http.Header

func (h headerCarrier) Get(key string) string { return propagation.HeaderCarrier(h).Get(key) }
func (h headerCarrier) Keys() []string        { return propagation.HeaderCarrier(h).Keys() }
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

// endCall ends the engine's span with its status, and tells the
// request's span what the engine answered: the GenAI operation's figures
// are the request's, said once.
func endCall(ctx context.Context, span trace.Span, model string, status int, start, first time.Time, c counts) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
	if req := trace.SpanFromContext(ctx); req.IsRecording() {
		attrs := make([]attribute.KeyValue, 5, 6)
		attrs[0], attrs[1] = attribute.Int("http.response.status_code", status), attribute.String("gen_ai.response.model", model)
		attrs[2], attrs[3] = attribute.Int("gen_ai.usage.input_tokens", c.prompt), attribute.Int("gen_ai.usage.output_tokens", c.completion)
		attrs[4] = attribute.Int("modelserve.timings.cache_n", c.cached)
		if !first.IsZero() {
			attrs = append(attrs, attribute.Float64("gen_ai.server.time_to_first_token", first.Sub(start).Seconds()))
		}
		req.SetAttributes(attrs...)
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

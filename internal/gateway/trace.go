package gateway

import (
	"context"
	"net/http"
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
// with a span for the wait for a replica (the queue, a cold start, the
// routing decision) and one for each call to an engine, which is passed
// the trace on. Attributes follow OpenTelemetry's GenAI conventions; the
// prompt and the answer are never recorded.

func (g *Gateway) tracer() trace.Tracer { return tracing.Or(g.opts.Tracer) }

func (g *Gateway) propagator() propagation.TextMapPropagator {
	if g.opts.Propagator == nil {
		return propagation.TraceContext{}
	}
	return g.opts.Propagator
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
	ctx := g.propagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	op := operationOf(r.URL.Path)
	ctx, span := g.tracer().Start(ctx, op+" "+model, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", op), attribute.String("gen_ai.request.model", model),
		attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
	return r.WithContext(ctx), span
}

// startWait begins the span of the wait for a replica of model.
func (g *Gateway) startWait(ctx context.Context, model string, ready int, tried []fleet.Replica, standIn bool) trace.Span {
	if g.opts.Tracer == nil {
		return nil
	}
	_, span := g.tracer().Start(ctx, "wait for a replica", trace.WithAttributes(
		attribute.String("modelserve.model", model), attribute.Int("modelserve.replicas_ready", ready),
		attribute.Bool("modelserve.canary", standIn)))
	if len(tried) > 0 {
		ids := make([]string, len(tried))
		for i, t := range tried {
			ids[i] = t.ID
		}
		span.SetAttributes(attribute.StringSlice("modelserve.avoided_replicas", ids))
	}
	return span
}

func endWait(span trace.Span, rep fleet.Replica, aerr *apiError, cold bool) {
	if span == nil {
		return
	}
	if aerr != nil {
		span.SetStatus(codes.Error, aerr.Message)
	} else {
		span.SetAttributes(attribute.String("modelserve.replica", rep.ID), attribute.String("modelserve.node", rep.Node))
	}
	span.SetAttributes(attribute.Bool("modelserve.cold_start", cold))
	span.End()
}

// startCall begins the client span of the call to an engine, and passes
// the trace on in up's headers.
func (g *Gateway) startCall(ctx context.Context, up *http.Request, model string, rep fleet.Replica, answerAs string) (context.Context, trace.Span) {
	if g.opts.Tracer == nil {
		return ctx, nil
	}
	ctx, span := g.tracer().Start(ctx, "engine "+operationOf(up.URL.Path), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", operationOf(up.URL.Path)), attribute.String("modelserve.replica", rep.ID),
		attribute.String("modelserve.node", rep.Node), attribute.String("server.address", rep.Endpoint), attribute.String("url.path", up.URL.Path)))
	if answerAs != "" {
		span.SetAttributes(attribute.String("modelserve.version", model), attribute.String("modelserve.canary_of", answerAs))
	}
	g.propagator().Inject(ctx, propagation.HeaderCarrier(up.Header))
	return ctx, span
}

// endCall ends the engine's span, and tells the request's span what the
// engine answered.
func endCall(ctx context.Context, span trace.Span, model string, status int, start, first time.Time, c counts) {
	if span == nil {
		return
	}
	attrs := []attribute.KeyValue{attribute.Int("http.response.status_code", status), attribute.String("gen_ai.response.model", model),
		attribute.Int("gen_ai.usage.input_tokens", c.prompt), attribute.Int("gen_ai.usage.output_tokens", c.completion),
		attribute.Int("modelserve.timings.cache_n", c.cached)}
	if !first.IsZero() {
		attrs = append(attrs, attribute.Float64("gen_ai.server.time_to_first_token", first.Sub(start).Seconds()))
	}
	span.SetAttributes(attrs...)
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
	if req := trace.SpanFromContext(ctx); req.IsRecording() {
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

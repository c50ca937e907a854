package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"modelserve/internal/auth"
	"modelserve/internal/ggufgen"
	"modelserve/internal/trace"
	"modelserve/internal/trace/jaegertest"
)

// TestJaegerReceivesAStreamedChat sends a streamed chat with a client's
// traceparent through a traced gateway, and one through an untraced one,
// and reads the real Jaeger's query API: the first trace continued with
// its spans and GenAI attributes and no prompt text, nothing of the second.
func TestJaegerReceivesAStreamedChat(t *testing.T) {
	jg := jaegertest.Start(t)
	ask := func(e *env, traceID string) {
		t.Helper()
		stream := e.client(e.mustToken("app-"+traceID[:4], auth.Limits{})).Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
			Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("a secret prompt about zebras")}, MaxTokens: openai.Int(8),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		}, option.WithHeader("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01"))
		for stream.Next() {
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
	}

	// Tracing off: the variables unset.
	off, err := trace.New(func(string) string { return "" }, trace.Options{})
	if err != nil || off.On() {
		t.Fatalf("tracing with no variables set: on %v, err %v", off.On(), err)
	}
	plain := mustEnv(t, Options{})
	plain.mustAdd(chatModel(t, "tiny", ggufgen.Spec{}))
	plain.waitServing("tiny", 1)
	const untraced = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	ask(plain, untraced)

	tr, err := trace.New(func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": jg.OTLP}[k]
	}, trace.Options{Every: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	e := mustEnv(t, Options{Tracer: tr.HotTracer("modelserve/gateway"), Propagator: tr.Propagator})
	e.mustAdd(chatModel(t, "tiny", ggufgen.Spec{}))
	e.waitServing("tiny", 1)
	const caller = "4bf92f3577b34da6a3ce929d0e0e4736"
	ask(e, caller)

	spans := jg.Trace(t, caller, "chat tiny", "route", "engine chat")
	by := map[string]jaegertest.Span{}
	for _, s := range spans {
		by[s.Name] = s
		for k, v := range s.Tags {
			if strings.Contains(v, "zebras") {
				t.Errorf("jaeger has the prompt in span %s, tag %s", s.Name, k)
			}
		}
	}
	req, call, route := by["chat tiny"], by["engine chat"], by["route"]
	if req.Parent != "00f067aa0ba902b7" || req.Service != "modelserve" || req.Tags["gen_ai.operation.name"] != "chat" ||
		req.Tags["gen_ai.request.model"] != "tiny" || req.Tags["gen_ai.usage.output_tokens"] == "" || req.Tags["gen_ai.server.time_to_first_token"] == "" {
		t.Errorf("request span in jaeger %+v; want the client's trace continued with GenAI attributes", req)
	}
	if call.Parent != req.SpanID || call.Tags["modelserve.replica"] == "" || route.Parent != req.SpanID ||
		route.Tags["modelserve.replica"] != call.Tags["modelserve.replica"] || route.Tags["modelserve.route.why"] == "" {
		t.Errorf("engine span %+v, route span %+v; want both children of the request, the route saying which replica and why", call, route)
	}
	// The untraced request went first: had it been exported, Jaeger
	// would have it by now.
	if leaked := jg.Trace(t, untraced); len(leaked) != 0 {
		t.Errorf("jaeger has %d spans of the request sent with tracing off", len(leaked))
	}
}

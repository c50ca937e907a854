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
	"modelserve/internal/trace/otlptest"
)

func TestAStreamedChatIsATraceContinuingTheCallers(t *testing.T) {
	rcv := otlptest.Start(t)
	tr, err := trace.New(func(k string) string {
		if k == "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" {
			return rcv.URL
		}
		return ""
	}, trace.Options{Every: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e := mustEnv(t, Options{Tracer: tr.Tracer("modelserve/gateway"), Propagator: tr.Propagator})
	e.mustAdd(chatModel(t, "tiny", ggufgen.Spec{}))
	e.waitServing("tiny", 1)
	tok := e.mustToken("app", auth.Limits{})
	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	const prompt = "a secret prompt about zebras"
	stream := e.client(tok).Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}, MaxTokens: openai.Int(8),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}, option.WithHeader("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01"))
	for stream.Next() {
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	req := rcv.WaitFor(t, "chat tiny")
	if req.TraceID != callerTrace || req.ParentID != callerSpan || req.Kind != "SPAN_KIND_SERVER" {
		t.Fatalf("request span %+v; want the caller's trace continued", req)
	}
	if req.Attrs["gen_ai.operation.name"] != "chat" || req.Attrs["gen_ai.request.model"] != "tiny" || req.Attrs["gen_ai.response.model"] != "tiny" ||
		req.Attrs["gen_ai.usage.output_tokens"] == "0" || req.Attrs["gen_ai.usage.output_tokens"] == "" || req.Attrs["gen_ai.server.time_to_first_token"] == "" {
		t.Errorf("request span attributes %v; want GenAI's operation, models, usage and time to first token", req.Attrs)
	}
	call := rcv.WaitFor(t, "engine chat")
	wait := rcv.WaitFor(t, "wait for a replica")
	if call.ParentID != req.SpanID || call.Attrs["modelserve.replica"] == "" || call.Attrs["http.response.status_code"] != "200" {
		t.Errorf("engine span %+v; want a child of the request naming the replica and status 200", call)
	}
	if wait.ParentID != req.SpanID || wait.Attrs["modelserve.replica"] != call.Attrs["modelserve.replica"] {
		t.Errorf("wait span %+v; want a child of the request naming the replica chosen", wait)
	}
	for _, s := range rcv.Spans() {
		for k, v := range s.Attrs {
			if strings.Contains(v, "zebras") {
				t.Errorf("span %s records the prompt in %s", s.Name, k)
			}
		}
	}
}

func TestTraceContentRecordsThePromptWhenAsked(t *testing.T) {
	rcv := otlptest.Start(t)
	tr, err := trace.New(func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rcv.URL}[k]
	}, trace.Options{Every: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	e := mustEnv(t, Options{Tracer: tr.Tracer("modelserve/gateway"), Propagator: tr.Propagator, TraceContent: true})
	e.mustAdd(chatModel(t, "tiny", ggufgen.Spec{}))
	e.waitServing("tiny", 1)
	_, err = e.client(e.mustToken("app", auth.Limits{})).Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("tell me of zebras")}, MaxTokens: openai.Int(4),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := rcv.WaitFor(t, "chat tiny").Attrs["gen_ai.input.messages"]; !strings.Contains(got, "tell me of zebras") {
		t.Fatalf("gen_ai.input.messages %q; want the prompt, --trace-content being on", got)
	}
}

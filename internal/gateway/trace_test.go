package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.opentelemetry.io/otel/propagation"
	oteltrace "go.opentelemetry.io/otel/trace"

	"modelserve/catalog"
	"modelserve/internal/auth"
	"modelserve/internal/fleet"
	"modelserve/internal/ggufgen"
	"modelserve/internal/testkit"
	"modelserve/internal/trace"
	"modelserve/internal/trace/otlptest"
)

func TestAStreamedChatIsATraceContinuingTheCallers(t *testing.T) {
	rcv, tr := traceTo(t)
	e := mustEnv(t, Options{Tracer: tr.HotTracer("modelserve/gateway"), Propagator: tr.Propagator})
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
	req := rcv.WaitFor(t, "chat tiny")
	if req.TraceID != callerTrace || req.ParentID != callerSpan || req.Kind != "SPAN_KIND_SERVER" {
		t.Fatalf("request span %+v; want the caller's trace continued", req)
	}
	if req.Attrs["gen_ai.operation.name"] != "chat" || req.Attrs["gen_ai.request.model"] != "tiny" || req.Attrs["gen_ai.response.model"] != "tiny" ||
		req.Attrs["gen_ai.usage.output_tokens"] == "0" || req.Attrs["gen_ai.usage.output_tokens"] == "" || req.Attrs["gen_ai.server.time_to_first_token"] == "" {
		t.Errorf("request span attributes %v; want GenAI's operation, models, usage and time to first token", req.Attrs)
	}
	call := rcv.WaitFor(t, "engine chat")
	route := rcv.WaitFor(t, "route")
	if call.ParentID != req.SpanID || call.Attrs["modelserve.replica"] == "" || call.Attrs["http.response.status_code"] != "200" {
		t.Errorf("engine span %+v; want a child of the request naming the replica and status 200", call)
	}
	if route.ParentID != req.SpanID || route.Attrs["modelserve.replica"] != call.Attrs["modelserve.replica"] ||
		route.Attrs["modelserve.route.why"] != onlyReplica || route.Attrs["modelserve.route.load"] != "0" ||
		!strings.Contains(route.Attrs["modelserve.route.candidates"], call.Attrs["modelserve.replica"]+" 0/") {
		t.Errorf("route span %+v; want a child of the request naming the replica chosen, why and its load", route)
	}
	for _, s := range rcv.Spans() {
		if s.Name == "cold start" || s.Name == "swap" || s.Name == "queue" {
			t.Errorf("span %s for a request that found its replica ready and idle", s.Name)
		}
	}
	for _, s := range rcv.Spans() {
		for k, v := range s.Attrs {
			if strings.Contains(v, "zebras") {
				t.Errorf("span %s records the prompt in %s", s.Name, k)
			}
		}
	}
}

// TestTraceContentRecordsThePromptWhenAsked: with --trace-content the
// request's span has the prompt and the answer, plain and streamed.
func TestTraceContentRecordsThePromptWhenAsked(t *testing.T) {
	rcv, tr := traceTo(t)
	e := mustEnv(t, Options{Tracer: tr.HotTracer("modelserve/gateway"), Propagator: tr.Propagator, TraceContent: true})
	e.mustAdd(chatModel(t, "tiny", ggufgen.Spec{}))
	e.waitServing("tiny", 1)
	client := e.client(e.mustToken("app", auth.Limits{}))
	params := openai.ChatCompletionNewParams{
		Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("tell me of zebras")}, MaxTokens: openai.Int(4),
	}
	plain, err := client.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	params.Messages = []openai.ChatCompletionMessageParamUnion{openai.UserMessage("and of giraffes")}
	stream := client.Chat.Completions.NewStreaming(context.Background(), params)
	var streamed strings.Builder
	for stream.Next() {
		if c := stream.Current(); len(c.Choices) > 0 {
			streamed.WriteString(c.Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	// An answer's text is on its span; an empty answer (the tiny model
	// may end at once) puts nothing there.
	has := func(attr, text string) bool {
		if text == "" {
			return attr == ""
		}
		b, _ := json.Marshal(text)
		return strings.Contains(attr, `"content":`+string(b))
	}
	var asked, answered []string
	testkit.WaitFor(t, 10*time.Second, "two request spans", func() (bool, string) {
		asked, answered = nil, nil
		for _, s := range rcv.Spans() {
			if s.Name == "chat tiny" {
				asked, answered = append(asked, s.Attrs["gen_ai.input.messages"]), append(answered, s.Attrs["gen_ai.output.messages"])
			}
		}
		return len(asked) == 2, fmt.Sprint(len(asked), " request spans")
	})
	if !strings.Contains(asked[0], "tell me of zebras") || !strings.Contains(asked[1], "and of giraffes") {
		t.Errorf("gen_ai.input.messages %q; want the prompts, --trace-content being on", asked)
	}
	if !has(answered[0], plain.Choices[0].Message.Content) || !has(answered[1], streamed.String()) {
		t.Errorf("gen_ai.output.messages %q; want the answers %q and %q", answered, plain.Choices[0].Message.Content, streamed.String())
	}
}

// TestAColdStartIsASpan: the first request for a model loaded on demand
// has a span for the wait for its replica to start, a cold start (no
// other replica was given back for it), before the routing decision.
func TestAColdStartIsASpan(t *testing.T) {
	rcv, tr := traceTo(t)
	e := mustEnv(t, Options{Tracer: tr.HotTracer("modelserve/gateway"), Propagator: tr.Propagator})
	m := chatModel(t, "lazy", ggufgen.Spec{})
	m.Scaling = catalog.Scaling{Min: 0, Max: 1}
	e.mustAdd(m)
	if _, err := e.client(e.mustToken("app", auth.Limits{})).Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "lazy", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(1),
	}); err != nil {
		t.Fatal(err)
	}
	req, cold, route := rcv.WaitFor(t, "chat lazy"), rcv.WaitFor(t, "cold start"), rcv.WaitFor(t, "route")
	if cold.ParentID != req.SpanID || cold.Attrs["modelserve.start"] != "cold_start" || cold.Attrs["modelserve.given_back"] != "" {
		t.Errorf("cold start span %+v; want a child of the request, a cold start with nothing given back", cold)
	}
	if route.ParentID != req.SpanID || route.Attrs["modelserve.replica"] == "" {
		t.Errorf("route span %+v; want a child of the request naming the replica", route)
	}
	// The wait is recorded once it is over: its span still covers it,
	// from within the request to the routing that ended it, and an
	// engine takes more than 10ms to start.
	if cold.Start < req.Start || cold.End < cold.Start+uint64(10*time.Millisecond) || cold.End > route.Start {
		t.Errorf("cold start from %d to %d, request from %d, route at %d; want the whole wait within the request, ended before the routing",
			cold.Start, cold.End, req.Start, route.Start)
	}
}

// TestASwapIsASpan: on a node with room for one of two models loaded on
// demand, the request for the second waits in a span named swap, which
// says which replica was given back for it.
func TestASwapIsASpan(t *testing.T) {
	rcv, tr := traceTo(t)
	node, err := fleet.Local(fleet.LocalConfig{Name: "small", CPUCores: 2, RAMBytes: 8 << 30, GPUs: []fleet.Card{}})
	if err != nil {
		t.Fatal(err)
	}
	e := mustEnvOn(t, []fleet.Node{node}, Options{Tracer: tr.HotTracer("modelserve/gateway"), Propagator: tr.Propagator})
	for _, name := range []string{"alpha", "beta"} {
		m := chatModel(t, name, ggufgen.Spec{})
		m.Profiles[0].RAMBytes = 5 << 30 // room for one of the two
		m.Scaling = catalog.Scaling{Min: 0, Max: 1, IdleAfter: time.Hour}
		e.mustAdd(m)
	}
	client := e.client(e.mustToken("app", auth.Limits{}))
	for _, name := range []string{"alpha", "beta"} {
		if _, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: name, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(1),
		}); err != nil {
			t.Fatal(err)
		}
	}
	alpha, beta := rcv.WaitFor(t, "chat alpha"), rcv.WaitFor(t, "chat beta")
	swap := rcv.WaitFor(t, "swap")
	if swap.ParentID != beta.SpanID || swap.Attrs["modelserve.start"] != "swap" ||
		!strings.Contains(swap.Attrs["modelserve.given_back"], "alpha-1: given back for beta") {
		t.Errorf("swap span %+v; want a child of beta's request naming alpha's replica given back", swap)
	}
	for _, s := range rcv.Spans() {
		if s.Name == "cold start" && s.ParentID != alpha.SpanID {
			t.Errorf("cold start span %+v; want only alpha's first request to have one", s)
		}
	}
}

// TestStoppedFor reads the fleet's sentences of replicas given back.
func TestStoppedFor(t *testing.T) {
	for _, c := range []struct {
		stop, model string
		want        bool
	}{
		{"chatty-1: given back for tiny, idle for 4 min", "tiny", true},
		{"chatty-1: given back for tiny once the answers it has end", "tiny", true},
		{"chatty-1: stopped to make room for tiny, a critical model", "tiny", true},
		{"chatty-1: given back for tiny-2, idle for 4 min", "tiny", false},
		{"tiny-1: given back for chatty, idle for 4 min", "tiny", false},
		{"chatty-1: given back for tiny", "tiny", true},
	} {
		if got := stoppedFor(c.stop, c.model); got != c.want {
			t.Errorf("stoppedFor(%q, %q) = %v; want %v", c.stop, c.model, got, c.want)
		}
	}
}

// TestACanaryTrialSaysWhichVersionAnswered: while an update is on trial,
// each traced request's engine span names the version that answered
// (modelserve.version), the canary's also the model it stands in for
// (modelserve.canary_of), as the engines' own token counts tell who
// answered; once the trial ends, the spans say nothing of one.
func TestACanaryTrialSaysWhichVersionAnswered(t *testing.T) {
	rcv, tr := traceTo(t)
	e := mustEnv(t, Options{Tracer: tr.HotTracer("modelserve/gateway"), Propagator: tr.Propagator})
	e.mustAdd(chatModel(t, "chatty", ggufgen.Spec{}))
	canary := canaryModel(t, "chatty", 0.5)
	e.mustAdd(canary)
	old, rep := e.waitServing("chatty", 1)[0], e.waitServing(canary.Name, 1)[0]
	c := e.client(e.token)

	// ask sends one request in a trace of its own, and says which of the
	// versions' engines generated its two tokens.
	ask := func(i int, versions ...fleet.Replica) (traceID, answered string) {
		t.Helper()
		traceID = fmt.Sprintf("%032x", i+1)
		before := make([]int, len(versions))
		for j, v := range versions {
			before[j] = e.engineTokens(v)
		}
		res, err := c.Chat.Completions.New(context.Background(), hello("chatty", 2), option.WithJSONSet("ignore_eos", true),
			option.WithHeader("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01"))
		if err != nil || res.Model != "chatty" {
			t.Fatalf("request %d: %v, the answer naming %q; want chatty's answer", i, err, res.Model)
		}
		testkit.WaitFor(t, 2*time.Second, fmt.Sprintf("request %d's tokens counted by one engine", i), func() (bool, string) {
			answered = ""
			var said []string
			total := 0
			for j, v := range versions {
				d := e.engineTokens(v) - before[j]
				if total += d; d == 2 {
					answered = v.Model
				}
				said = append(said, fmt.Sprintf("%s's engine generated %d", v.Model, d))
			}
			return total == 2 && answered != "", strings.Join(said, ", ")
		})
		return traceID, answered
	}
	// engineSpan is the engine span of the trace traceID.
	engineSpan := func(traceID string) otlptest.Span {
		t.Helper()
		var got otlptest.Span
		testkit.WaitFor(t, 10*time.Second, "the engine span of trace "+traceID, func() (bool, string) {
			for _, s := range rcv.Spans() {
				if s.TraceID == traceID && s.Name == "engine chat" {
					got = s
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d spans", len(rcv.Spans()))
		})
		return got
	}

	byVersion := map[string]int{}
	for i := range 6 {
		traceID, answered := ask(i, old, rep)
		byVersion[answered]++
		s := engineSpan(traceID)
		wantOf, wantReplica := "", old.ID
		if answered == canary.Name {
			wantOf, wantReplica = "chatty", rep.ID
		}
		if s.Attrs["modelserve.version"] != answered || s.Attrs["modelserve.canary_of"] != wantOf || s.Attrs["modelserve.replica"] != wantReplica {
			t.Errorf("request %d, answered by %s: engine span %v; want modelserve.version %q, canary_of %q, replica %s",
				i, answered, s.Attrs, answered, wantOf, wantReplica)
		}
	}
	if byVersion["chatty"] != 3 || byVersion[canary.Name] != 3 {
		t.Fatalf("answered by version: %v; want 3 each at a share of 0.5", byVersion)
	}

	// The trial over, a request's span names no version.
	if err := e.cat.Remove(context.Background(), canary.Name); err != nil {
		t.Fatal(err)
	}
	e.gw.Refresh()
	traceID, answered := ask(6, old)
	s := engineSpan(traceID)
	if _, ok := s.Attrs["modelserve.canary_of"]; ok || answered != "chatty" {
		t.Errorf("after the trial, answered by %s: engine span %v; want chatty's, with no canary_of", answered, s.Attrs)
	}
	if _, ok := s.Attrs["modelserve.version"]; ok {
		t.Errorf("after the trial: engine span %v names a version", s.Attrs)
	}
}

// TestTheEngineIsSentTheTraceContext: the headers the gateway writes
// toward an engine are those the W3C propagator writes, sampled or not,
// with a trace state or without.
func TestTheEngineIsSentTheTraceContext(t *testing.T) {
	tid, _ := oteltrace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := oteltrace.SpanIDFromHex("00f067aa0ba902b7")
	state, _ := oteltrace.ParseTraceState("vendor=abc,other=1")
	for name, sc := range map[string]oteltrace.SpanContextConfig{
		"sampled":       {TraceID: tid, SpanID: sid, TraceFlags: oteltrace.FlagsSampled},
		"not sampled":   {TraceID: tid, SpanID: sid},
		"a trace state": {TraceID: tid, SpanID: sid, TraceFlags: oteltrace.FlagsSampled, TraceState: state},
		"no trace":      {},
	} {
		t.Run(name, func(t *testing.T) {
			sc := oteltrace.NewSpanContext(sc)
			want := http.Header{}
			propagation.TraceContext{}.Inject(oteltrace.ContextWithSpanContext(context.Background(), sc), propagation.HeaderCarrier(want))
			got := http.Header{}
			setTraceContext(got, sc)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("headers %v; want the propagator's %v", got, want)
			}
		})
	}
}

// traceTo is tracing exported to a receiver of the test's own every 50
// ms, shut down when the test ends.
func traceTo(t *testing.T) (*otlptest.Receiver, *trace.Tracing) {
	t.Helper()
	rcv := otlptest.Start(t)
	tr, err := trace.New(func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rcv.URL}[k]
	}, trace.Options{Every: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Shutdown(context.Background()) })
	return rcv, tr
}

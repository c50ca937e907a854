package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/llamatest"
	"modelserve/internal/trace"
	"modelserve/internal/trace/jaegertest"
	"modelserve/internal/trace/otlptest"
	"modelserve/jobs"
)

// TestServeTracesAJobThroughTheAPI runs the server with an OTLP endpoint
// set, as an operator would: the job's JSON carries its trace id, the
// trace's counters are in /metrics, and the stop sends what is queued.
func TestServeTracesAJobThroughTheAPI(t *testing.T) {
	rcv := otlptest.Start(t)
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Tiny-Llama-GGUF", "Tiny-Llama-Q4_K_M.gguf", ggufgen.Spec{ContextLength: 8192})
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: t.TempDir(), HFEndpoint: hub.URL(),
		OTel: trace.Env{TracesEndpoint: rcv.URL, ServiceName: "modelserve-test"}})

	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Tiny-Llama-GGUF", "replicas": 0, "context_length": 2048, "ctx_pool": 4096}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d %+v", code, job)
	}
	seen := s.watch(job.ID, 2*time.Minute)
	if last := seen[len(seen)-1]; last.State != jobs.Done {
		t.Fatalf("job ended %s: %s", last.State, last.Error)
	}
	var got jobs.Job
	s.do("GET", "/api/v1/jobs/"+job.ID, nil, &got)
	if len(got.TraceID) != 32 {
		t.Fatalf("the API's job has trace_id %q; want the trace of its run", got.TraceID)
	}
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(text), "modelserve_trace_spans_dropped_total 0") {
		t.Errorf("/metrics lacks modelserve_trace_spans_dropped_total 0")
	}
	s.stop()
	var root otlptest.Span
	for _, sp := range rcv.Spans() {
		if sp.Name == "serve job" {
			root = sp
		}
	}
	if root.TraceID != got.TraceID || root.Service != "modelserve-test" {
		t.Fatalf("after the stop the collector has root %+v; want trace %s of service modelserve-test", root, got.TraceID)
	}
}

// TestJaegerTracesTheBinary runs modelserve's own executable as an
// operator would, with the standard OTEL_* variables pointing at the real
// Jaeger and --trace-url at its viewer: a serve job arrives in Jaeger as a
// trace with a span for each step, the job page links to that trace, and
// a streamed chat sent with a client's traceparent arrives as that trace
// continued, with the routing decision and the call to the engine, and no
// prompt text. Under make test (MODELSERVE_REQUIRE_JAEGER=1) a Jaeger not
// built fails the test.
func TestJaegerTracesTheBinary(t *testing.T) {
	jg := jaegertest.Start(t)
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Tiny-Llama-GGUF", "Tiny-Llama-Q4_K_M.gguf", ggufgen.Spec{ContextLength: 8192})
	s, _ := startBinary(t, hub, llamatest.Path(t),
		[]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + jg.OTLP, "OTEL_SERVICE_NAME=modelserve-binary"},
		"--trace-url", jg.Query+"/trace/{trace_id}")

	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Tiny-Llama-GGUF", "replicas": 1, "context_length": 2048, "ctx_pool": 4096}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d %+v", code, job)
	}
	seen := s.watch(job.ID, 2*time.Minute)
	last := seen[len(seen)-1]
	if last.State != jobs.Done || len(last.TraceID) != 32 {
		t.Fatalf("job ended %s (%s) with trace id %q; want done, with its trace", last.State, last.Error, last.TraceID)
	}
	spans := map[string]jaegertest.Span{}
	var root jaegertest.Span
	steps := []string{"registry", "plan", "mirror", "check", "catalog", "placement", "smoke test"}
	for _, sp := range jg.Trace(t, last.TraceID, append([]string{"serve job"}, steps...)...) {
		if sp.Name == "serve job" {
			root = sp
		} else {
			spans[sp.Name] = sp
		}
	}
	if root.Service != "modelserve-binary" {
		t.Fatalf("jaeger's root span of the job %+v; want serve job, of service modelserve-binary", root)
	}
	for _, step := range steps {
		if sp, ok := spans[step]; !ok || sp.Parent != root.SpanID {
			t.Errorf("jaeger has step span %q %+v; want a child of the job's root span", step, sp)
		}
	}

	// The job page links to the trace, where the viewer shows it.
	mustRun(t, "a long enough password\n", "user", "add", "--data", s.data, "ada")
	c := newConsole(t, s.base, nil)
	c.signIn("ada", "a long enough password")
	_, doc := c.page("/jobs/" + job.ID)
	link := doc.Find(`[data-testid="job-trace"]`)
	if href, _ := link.Attr("href"); href != jg.Query+"/trace/"+last.TraceID || strings.TrimSpace(link.Text()) != last.TraceID {
		t.Errorf("the job page's trace link is %q (%q); want %s/trace/%s", href, link.Text(), jg.Query, last.TraceID)
	}

	const caller, callerSpan = "5bf92f3577b34da6a3ce929d0e0e4737", "00f067aa0ba902b8"
	client := openai.NewClient(option.WithBaseURL(s.base+"/v1/"), option.WithAPIKey(s.token), option.WithMaxRetries(0))
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: last.Model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("a secret prompt about zebras")},
		MaxTokens: openai.Int(8), StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}, option.WithHeader("traceparent", "00-"+caller+"-"+callerSpan+"-01"))
	for stream.Next() {
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	by := map[string]jaegertest.Span{}
	for _, sp := range jg.Trace(t, caller, "chat "+last.Model, "route", "engine chat") {
		by[sp.Name] = sp
		for k, v := range sp.Tags {
			if strings.Contains(v, "zebras") {
				t.Errorf("jaeger has the prompt in span %s, tag %s", sp.Name, k)
			}
		}
	}
	req, route, call := by["chat "+last.Model], by["route"], by["engine chat"]
	if req.Parent != callerSpan || req.Tags["gen_ai.request.model"] != last.Model || req.Tags["gen_ai.usage.output_tokens"] == "" {
		t.Errorf("jaeger's request span %+v; want the caller's trace continued, with GenAI attributes", req)
	}
	if route.Parent != req.SpanID || route.Tags["modelserve.replica"] == "" || route.Tags["modelserve.route.why"] == "" ||
		call.Parent != req.SpanID || call.Tags["modelserve.replica"] != route.Tags["modelserve.replica"] {
		t.Errorf("jaeger's route span %+v and engine span %+v; want children of the request naming one replica, and why", route, call)
	}
}

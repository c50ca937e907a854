package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/trace"
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

package jobs

import (
	"context"
	"net/http"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
	"modelserve/internal/trace"
	"modelserve/internal/trace/jaegertest"
)

// TestJaegerReceivesAServeJob serves a model with traces going to the real
// Jaeger, and finds the job's trace through Jaeger's query API: the root,
// a span per step with its outcome, and the Hub's requests.
func TestJaegerReceivesAServeJob(t *testing.T) {
	jg := jaegertest.Start(t)
	tr, err := trace.New(func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": jg.OTLP}[k]
	}, trace.Options{Every: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	e := newEnv(t, func(e *testEnv) {
		e.deps.Tracer = tr.Tracer("modelserve/jobs")
		c, err := hf.NewClient(hf.Options{Endpoint: e.hub.URL(), MaxRetries: -1, HTTP: &http.Client{Transport: otelhttp.NewTransport(http.DefaultTransport,
			otelhttp.WithTracerProvider(tr.Provider), otelhttp.WithPropagators(tr.Propagator))}})
		if err != nil {
			t.Fatal(err)
		}
		e.client = c
	})
	e.addModel("acme/Tiny-GGUF", hubtest.RepoOptions{}, map[string]ggufgen.Spec{"tiny-Q4_K_M.gguf": {ContextLength: 2048}})
	j := MustStart(t, e.srv, Request{Repo: "acme/Tiny-GGUF", Replicas: 1})
	end := MustEnd(t, e.srv, j.ID)
	if end.State != Done {
		t.Fatalf("job ended %s: %s", end.State, end.Error)
	}
	names := []string{"serve job"}
	for _, st := range end.Steps {
		names = append(names, st.Name)
	}
	spans := jg.Trace(t, end.TraceID, names...)
	by := map[string]jaegertest.Span{}
	clients := 0
	for _, s := range spans {
		by[s.Name] = s
		if s.Tags["span.kind"] == "client" {
			clients++
		}
	}
	root := by["serve job"]
	if root.Tags["modelserve.job.id"] != j.ID || root.Tags["modelserve.job.state"] != Done {
		t.Fatalf("root span in jaeger %+v", root)
	}
	for _, st := range end.Steps {
		if sp := by[st.Name]; sp.Parent != root.SpanID || sp.Tags["modelserve.step.state"] != st.State {
			t.Errorf("step %s in jaeger %+v; want a child of the root, %s", st.Name, sp, st.State)
		}
	}
	if clients < 2 {
		t.Errorf("jaeger has %d client spans; want the registry's and the mirror's requests", clients)
	}
}

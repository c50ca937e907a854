package trace_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"

	"modelserve/internal/trace"
	"modelserve/internal/trace/otlptest"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestOffWhenNoEndpointIsSet(t *testing.T) {
	tr, err := trace.New(env(nil), trace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.On() {
		t.Fatal("tracing is on with no OTEL_EXPORTER_OTLP_* endpoint set")
	}
	for _, tracer := range []oteltrace.Tracer{tr.Tracer("t"), tr.HotTracer("t")} {
		_, span := tracer.Start(context.Background(), "x")
		if span.IsRecording() || span.SpanContext().IsValid() {
			t.Fatal("a span of tracing turned off is recorded")
		}
	}
}

func TestSDKDisabledWinsOverAnEndpoint(t *testing.T) {
	rcv := otlptest.Start(t)
	tr, err := trace.New(env(map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rcv.URL, "OTEL_SDK_DISABLED": "true"}), trace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.Tracer("t").Start(context.Background(), "x")
	span.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := rcv.Spans(); tr.On() || len(got) != 0 {
		t.Fatalf("OTEL_SDK_DISABLED=true still exported %d spans", len(got))
	}
}

func TestExportsToTheBaseEndpointWithTheServiceName(t *testing.T) {
	rcv := otlptest.Start(t)
	base := strings.TrimSuffix(rcv.URL, "/v1/traces")
	tr, err := trace.New(env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": base}), trace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.Tracer("t").Start(context.Background(), "job")
	span.SetAttributes(attribute.String("k", "v"))
	span.End()
	// Shutdown flushes what is queued.
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := rcv.WaitFor(t, "job")
	if got.Service != "modelserve" || got.Attrs["k"] != "v" {
		t.Fatalf("got service %q attrs %v, want modelserve and k=v", got.Service, got.Attrs)
	}
}

func TestServiceNameAndSamplerFromTheEnvironment(t *testing.T) {
	rcv := otlptest.Start(t)
	tr, err := trace.New(env(map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rcv.URL, "OTEL_SERVICE_NAME": "edge", "OTEL_TRACES_SAMPLER": "always_off"}), trace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.Tracer("t").Start(context.Background(), "unsampled")
	span.End()
	tr.Shutdown(context.Background())
	if n := len(rcv.Spans()); n != 0 {
		t.Fatalf("always_off exported %d spans", n)
	}

	tr, err = trace.New(env(map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rcv.URL, "OTEL_SERVICE_NAME": "edge"}), trace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, span = tr.Tracer("t").Start(context.Background(), "sampled")
	span.End()
	tr.Shutdown(context.Background())
	if got := rcv.WaitFor(t, "sampled"); got.Service != "edge" {
		t.Fatalf("service %q, want OTEL_SERVICE_NAME's edge", got.Service)
	}
}

func TestBadVariablesAreNamed(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, "OTEL_TRACES_SAMPLER_ARG"},
	} {
		if _, err := trace.New(env(c.env), trace.Options{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want one naming %s", c.env, err, c.want)
		}
	}
}

// A collector that never answers fills the queue; what does not fit is
// dropped and counted, and ending a span never waits for it.
func TestAStuckCollectorDropsAndCountsSpans(t *testing.T) {
	release := make(chan struct{})
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer stuck.Close()
	defer close(release)
	reg := prometheus.NewRegistry()
	tr, err := trace.New(env(map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": stuck.URL + "/v1/traces"}),
		trace.Options{QueueSize: 4, BatchSize: 1, ExportTimeout: time.Minute, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		tracer := tr.Tracer("t")
		if i%2 == 1 {
			tracer = tr.HotTracer("t") // the gateway's spans wait in the same queue
		}
		_, span := tracer.Start(context.Background(), "x")
		span.End()
	}
	dropped := 0.0
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "modelserve_trace_spans_dropped_total" {
			dropped = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	// One in the exporter's hands, four queued: the rest dropped.
	if dropped < 40 {
		t.Fatalf("dropped %v of 50 spans with a queue of 4 and a stuck collector, want at least 40", dropped)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := tr.Shutdown(ctx); err == nil {
		t.Fatal("Shutdown with a stuck collector returned no error; it should give up when its context ends")
	}
}

// A client told to send JSON sends the spans whole: the exporter that
// writes protobuf itself steps aside for the SDK's.
func TestJSONProtocolStillCarriesTheSpans(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
	got := make(chan string, 4)
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r.Header.Get("Content-Type") + " " + string(b)
	}))
	defer col.Close()
	tr, err := trace.New(env(map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": col.URL + "/v1/traces"}), trace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.Tracer("t").Start(context.Background(), "a job in json")
	span.End()
	_, span = tr.HotTracer("t").Start(context.Background(), "a request in json")
	span.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case body := <-got:
		if !strings.HasPrefix(body, "application/json") || !strings.Contains(body, `"a job in json"`) || !strings.Contains(body, `"a request in json"`) {
			t.Fatalf("the collector was sent %.300q, want JSON naming both spans", body)
		}
	default:
		t.Fatal("nothing was exported")
	}
}

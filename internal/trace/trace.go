// Package trace sets up OpenTelemetry tracing from the standard OTEL_*
// variables: spans go to a collector over OTLP/HTTP, or, with neither
// endpoint variable set (or OTEL_SDK_DISABLED=true), nowhere, through a
// no-op tracer that costs nothing.
//
// The variables read are OTEL_EXPORTER_OTLP_ENDPOINT (a base address, to
// which /v1/traces is added), OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (the
// traces address itself, which wins), OTEL_SERVICE_NAME (modelserve when
// unset), OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (the
// specification's names; parentbased_always_on when unset) and
// OTEL_SDK_DISABLED. The exporter reads its own headers, timeout and
// compression variables as it always does.
//
// Finished spans wait in a bounded queue for the exporter: a collector that
// is down or slow never slows a request or a job. What does not fit is
// dropped and counted (modelserve_trace_spans_dropped_total).
package trace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracing is modelserve's tracer provider and the propagator of the W3C
// trace context (traceparent, tracestate), on or off.
type Tracing struct {
	Provider   oteltrace.TracerProvider
	Propagator propagation.TextMapPropagator
	// Endpoint is where spans go; empty when tracing is off.
	Endpoint string
	sdk      *sdktrace.TracerProvider
	queue    *queue
	// lean makes the hot path's spans (HotTracer); nil when the SDK's
	// exporter sends JSON, which only takes the SDK's spans.
	lean *leanProvider
}

// Off is tracing turned off: a no-op tracer, nothing exported.
func Off() *Tracing {
	return &Tracing{Provider: noop.NewTracerProvider(), Propagator: propagation.TraceContext{}}
}

// On reports whether spans are recorded and exported.
func (t *Tracing) On() bool { return t != nil && t.sdk != nil }

// Tracer is the named tracer of a part of modelserve.
func (t *Tracing) Tracer(name string) oteltrace.Tracer {
	if t == nil {
		return off
	}
	return t.Provider.Tracer(name)
}

// HotTracer is the named tracer of a part that traces every request it
// serves (the gateway): lean spans (lean.go), which cost a request a
// fraction of the SDK's, exported with the SDK's to the same collector.
// With tracing off it records nothing, and with the JSON protocol it is
// the SDK's.
func (t *Tracing) HotTracer(name string) oteltrace.Tracer {
	if t == nil || t.lean == nil {
		return t.Tracer(name)
	}
	return t.lean.Tracer(name)
}

// off is the tracer that records nothing.
var off = noop.NewTracerProvider().Tracer("")

// Or is t, or for a part given none, the tracer that records nothing:
// what every part that may be given a tracer asks.
func Or(t oteltrace.Tracer) oteltrace.Tracer {
	if t == nil {
		return off
	}
	return t
}

// Options bound the export queue; zero values take the defaults.
type Options struct {
	// QueueSize is how many finished spans may wait for the exporter
	// (2048); BatchSize how many go in one export (512); Every the
	// longest a span waits before its batch goes (1s); ExportTimeout the
	// longest one export may take (10s).
	QueueSize, BatchSize int
	Every, ExportTimeout time.Duration
	// Registerer, when not nil, is given the queue's counters.
	Registerer prometheus.Registerer
}

// Env is the OTEL_* variables tracing is set up from, as given.
type Env struct {
	Endpoint, TracesEndpoint, ServiceName, Sampler, SamplerArg, Disabled string
}

// ReadEnv reads the variables through getenv.
func ReadEnv(getenv func(string) string) Env {
	return Env{Endpoint: getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), TracesEndpoint: getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
		ServiceName: getenv("OTEL_SERVICE_NAME"), Sampler: getenv("OTEL_TRACES_SAMPLER"), SamplerArg: getenv("OTEL_TRACES_SAMPLER_ARG"),
		Disabled: getenv("OTEL_SDK_DISABLED")}
}

// New reads the variables through getenv and sets tracing up, or returns
// Off. A variable with a value it cannot read is an error that names it.
func New(getenv func(string) string, o Options) (*Tracing, error) {
	return FromEnv(ReadEnv(getenv), o)
}

// FromEnv sets tracing up from the variables read, or returns Off.
func FromEnv(e Env, o Options) (*Tracing, error) {
	getenv := func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": e.Endpoint, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": e.TracesEndpoint,
			"OTEL_SERVICE_NAME": e.ServiceName, "OTEL_TRACES_SAMPLER": e.Sampler, "OTEL_TRACES_SAMPLER_ARG": e.SamplerArg,
			"OTEL_SDK_DISABLED": e.Disabled}[k]
	}
	if v := strings.TrimSpace(getenv("OTEL_SDK_DISABLED")); strings.EqualFold(v, "true") {
		return Off(), nil
	}
	endpoint := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	if endpoint == "" {
		if base := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")); base != "" {
			endpoint = strings.TrimRight(base, "/") + "/v1/traces"
		}
	}
	if endpoint == "" {
		return Off(), nil
	}
	if !strings.HasPrefix(endpoint, "http://") && !strings.HasPrefix(endpoint, "https://") {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) is an http:// or https:// address, not %q", endpoint)
	}
	sampler, err := samplerOf(getenv("OTEL_TRACES_SAMPLER"), getenv("OTEL_TRACES_SAMPLER_ARG"))
	if err != nil {
		return nil, err
	}
	exp, ours, err := exporterTo(endpoint)
	if err != nil {
		return nil, fmt.Errorf("tracing to %s: %w", endpoint, err)
	}
	name := strings.TrimSpace(getenv("OTEL_SERVICE_NAME"))
	if name == "" {
		name = "modelserve"
	}
	q := newQueue(exp, o)
	if o.Registerer != nil {
		if err := q.register(o.Registerer); err != nil {
			return nil, err
		}
	}
	res := resource.NewSchemaless(attribute.String("service.name", name))
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithResource(res), sdktrace.WithSpanProcessor(q))
	t := &Tracing{Provider: sdk, Propagator: propagation.TraceContext{}, Endpoint: endpoint, sdk: sdk, queue: q}
	if ours {
		t.lean = newLeanProvider(sampler, res, q)
	}
	return t, nil
}

// Flush exports what is queued now, within ctx: for a benchmark that
// counts the export's work with the requests that made the spans.
func (t *Tracing) Flush(ctx context.Context) error {
	if !t.On() {
		return nil
	}
	return t.sdk.ForceFlush(ctx)
}

// exporterTo is the exporter to the collector at endpoint: modelserve's
// own (ours), which writes the protobuf encoding, or, when the client is
// told to send JSON (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL is http/json), the SDK's, which builds the
// messages JSON is written from.
func exporterTo(endpoint string) (exp batchExporter, ours bool, err error) {
	protocol, ok := os.LookupEnv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if !ok {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if strings.TrimSpace(protocol) == "http/json" {
		sdk, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(endpoint))
		return &sdkExporter{SpanExporter: sdk}, false, err
	}
	e := newExporter(otlptracehttp.NewClient(otlptracehttp.WithEndpointURL(endpoint)))
	return e, true, e.start(context.Background())
}

// Shutdown exports what is queued, within ctx, and stops. Spans still
// queued when ctx ends are dropped (and counted).
func (t *Tracing) Shutdown(ctx context.Context) error {
	if !t.On() {
		return nil
	}
	return t.sdk.Shutdown(ctx)
}

// samplerOf is the sampler OTEL_TRACES_SAMPLER names, as the
// specification spells them.
func samplerOf(name, arg string) (sdktrace.Sampler, error) {
	ratio := func() (float64, error) {
		if strings.TrimSpace(arg) == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(strings.TrimSpace(arg), 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG is a ratio from 0 to 1, not %q", arg)
		}
		return r, nil
	}
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio", "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		if strings.HasPrefix(strings.ToLower(strings.TrimSpace(name)), "parentbased") {
			return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), nil
		}
		return sdktrace.TraceIDRatioBased(r), nil
	}
	return nil, errors.New("OTEL_TRACES_SAMPLER is always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio, not " + strconv.Quote(name))
}

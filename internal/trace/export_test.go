package trace

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	oteltrace "go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// ExportSpans sends one batch of the SDK's spans, as the SDK's exporter
// is sent them: the tests and benchmarks set the two side by side. The
// queue sends modelserve's exporter its batches through export.
func (e *exporter) ExportSpans(ctx context.Context, ss []sdktrace.ReadOnlySpan) error {
	items := make([]item, len(ss))
	for i, s := range ss {
		items[i] = item{sdk: s}
	}
	return e.export(ctx, items)
}

// captured keeps each upload as it was sent: the exporter fills the same
// messages again for its next batch.
type captured struct {
	sent []*coltracepb.ExportTraceServiceRequest
}

func (c *captured) Start(context.Context) error { return nil }
func (c *captured) Stop(context.Context) error  { return nil }
func (c *captured) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	b, err := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: rs})
	if err != nil {
		return err
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		return err
	}
	c.sent = append(c.sent, &req)
	return nil
}

// The exporter that keeps its messages sends, batch after batch, what the
// SDK's own OTLP exporter sends for the same spans: every kind of
// attribute, events, links, parents, statuses and scopes, with nothing of
// a longer batch left over in a shorter one after it.
func TestTheExporterSendsWhatTheSDKsWould(t *testing.T) {
	res := resource.NewSchemaless(attribute.String("service.name", "modelserve"))
	id := func(b byte) (oteltrace.TraceID, oteltrace.SpanID) {
		return oteltrace.TraceID{b, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, oteltrace.SpanID{b, 1, 2, 3, 4, 5, 6, 7}
	}
	sc := func(b byte, remote bool) oteltrace.SpanContext {
		tid, sid := id(b)
		return oteltrace.NewSpanContext(oteltrace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: oteltrace.FlagsSampled, Remote: remote})
	}
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	gateway := instrumentation.Scope{Name: "modelserve/gateway"}
	jobs := instrumentation.Scope{Name: "modelserve/jobs", Version: "1", Attributes: attribute.NewSet(attribute.Bool("k", true))}
	stub := func(name string, b byte, scope instrumentation.Scope, attrs ...attribute.KeyValue) tracetest.SpanStub {
		return tracetest.SpanStub{Name: name, SpanContext: sc(b, false), Parent: sc(b+100, true), SpanKind: oteltrace.SpanKindServer,
			StartTime: at, EndTime: at.Add(time.Millisecond), Attributes: attrs, Resource: res, InstrumentationScope: scope}
	}
	long := tracetest.SpanStubs{
		stub("chat tiny", 1, gateway, attribute.String("gen_ai.request.model", "tiny"), attribute.Int("n", 12), attribute.Bool("b", true),
			attribute.Float64("f", 0.25), attribute.StringSlice("ss", []string{"a", "b"}), attribute.Int64Slice("is", []int64{1, 2}),
			attribute.BoolSlice("bs", []bool{true}), attribute.Float64Slice("fs", []float64{1.5})),
		stub("job", 2, jobs, attribute.String("modelserve.model", "tiny")),
		stub("route", 3, gateway, attribute.String("modelserve.replica", "tiny-1"), attribute.Int("modelserve.route.load", 1)),
	}
	long[1].Status = sdktrace.Status{Code: codes.Error, Description: "the mirror failed"}
	long[1].Links = []sdktrace.Link{{SpanContext: sc(9, false), Attributes: []attribute.KeyValue{attribute.String("why", "resumed")}}}
	long[1].Events = []sdktrace.Event{{Name: "retry", Time: at, Attributes: []attribute.KeyValue{attribute.Int("attempt", 2)}}}
	long[2].Parent = oteltrace.SpanContext{}
	long[2].SpanKind = oteltrace.SpanKindInternal
	short := tracetest.SpanStubs{stub("engine chat", 4, gateway, attribute.String("url.path", "/v1/chat/completions"))}
	short[0].SpanKind = oteltrace.SpanKindClient

	ours, theirs := &captured{}, &captured{}
	e := newExporter(ours)
	sdk := otlptrace.NewUnstarted(theirs)
	for _, batch := range []tracetest.SpanStubs{long, short, long} {
		for _, exp := range []sdktrace.SpanExporter{e, sdk} {
			if err := exp.ExportSpans(context.Background(), batch.Snapshots()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(ours.sent) != 3 || len(theirs.sent) != 3 {
		t.Fatalf("sent %d and %d batches, want 3 each", len(ours.sent), len(theirs.sent))
	}
	for i := range ours.sent {
		if !proto.Equal(theirs.sent[i], ours.sent[i]) {
			t.Errorf("batch %d differs from the SDK's:\nSDK:  %s\nours: %s", i+1, prototext.Format(theirs.sent[i]), prototext.Format(ours.sent[i]))
		}
	}
}

// marshalling sends nowhere, but marshals each batch as the OTLP/HTTP
// client does.
type marshalling struct{ captured }

func (*marshalling) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	_, err := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: rs})
	return err
}

// BenchmarkExport: a batch of 512 spans shaped like a gateway request's
// (the request, its route and its engine call, with their attributes)
// turned into OTLP's messages and marshalled, by the exporter that keeps
// its messages beside the SDK's own. Reported per span.
func BenchmarkExport(b *testing.B) {
	res := resource.NewSchemaless(attribute.String("service.name", "modelserve"))
	scope := instrumentation.Scope{Name: "modelserve/gateway"}
	at := time.Now()
	var batch tracetest.SpanStubs
	for i := range 512 {
		tid := oteltrace.TraceID{byte(i), byte(i >> 8), 1}
		stub := tracetest.SpanStub{SpanContext: oteltrace.NewSpanContext(oteltrace.SpanContextConfig{TraceID: tid, SpanID: oteltrace.SpanID{byte(i), 1},
			TraceFlags: oteltrace.FlagsSampled}), StartTime: at, EndTime: at.Add(time.Millisecond), Resource: res, InstrumentationScope: scope}
		switch i % 3 {
		case 0:
			stub.Name, stub.SpanKind = "chat tiny", oteltrace.SpanKindServer
			stub.Attributes = []attribute.KeyValue{attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.request.model", "tiny"),
				attribute.String("http.request.method", "POST"), attribute.String("url.path", "/v1/chat/completions"),
				attribute.Int("http.response.status_code", 200), attribute.String("gen_ai.response.model", "tiny"),
				attribute.Int("gen_ai.usage.input_tokens", 12), attribute.Int("gen_ai.usage.output_tokens", 8),
				attribute.Int("modelserve.timings.cache_n", 4), attribute.Float64("gen_ai.server.time_to_first_token", 0.002)}
		case 1:
			stub.Name = "route"
			stub.Attributes = []attribute.KeyValue{attribute.String("modelserve.replica", "tiny-1"), attribute.String("modelserve.node", "local"),
				attribute.String("modelserve.route.why", "only replica"), attribute.Int("modelserve.route.load", 0),
				attribute.Int("modelserve.replicas_ready", 1), attribute.String("modelserve.route.candidates", "tiny-1 0/4")}
		case 2:
			stub.Name, stub.SpanKind = "engine chat", oteltrace.SpanKindClient
			stub.Attributes = []attribute.KeyValue{attribute.String("modelserve.replica", "tiny-1"), attribute.String("modelserve.node", "local"),
				attribute.String("server.address", "http://127.0.0.1:40001"), attribute.String("url.path", "/v1/chat/completions"),
				attribute.Int("http.response.status_code", 200)}
		}
		batch = append(batch, stub)
	}
	spans := batch.Snapshots()
	for _, side := range []struct {
		name string
		exp  sdktrace.SpanExporter
	}{{"kept", newExporter(&marshalling{})}, {"sdk", otlptrace.NewUnstarted(&marshalling{})}} {
		b.Run(side.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := side.exp.ExportSpans(context.Background(), spans); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(spans)), "ns/span")
		})
	}
}

package trace

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// side is a provider of spans, the SDK's or the lean one, exporting
// through modelserve's queue and exporter to what it captures.
type side struct {
	provider oteltrace.TracerProvider
	q        *queue
	sent     *captured
}

func sides(t *testing.T, sampler sdktrace.Sampler) (sdk, lean side) {
	res := resource.NewSchemaless(attribute.String("service.name", "modelserve"))
	mk := func() (*queue, *captured) {
		c := &captured{}
		q := newQueue(newExporter(c), Options{})
		t.Cleanup(func() { q.Shutdown(context.Background()) })
		return q, c
	}
	sq, sc := mk()
	lq, lc := mk()
	return side{sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithResource(res), sdktrace.WithSpanProcessor(sq)), sq, sc},
		side{newLeanProvider(sampler, res, lq), lq, lc}
}

// spans flushes what s queued, and is every span it has sent, by name.
func (s side) spans(t *testing.T) map[string]*tracepb.Span {
	t.Helper()
	if err := s.q.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := map[string]*tracepb.Span{}
	for _, req := range s.sent.sent {
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					got[sp.Name] = sp
				}
			}
		}
	}
	return got
}

// A gateway request's spans, and every other thing the API lets a span
// be told, arrive at the collector from lean spans as they do from the
// SDK's: the same message but for the random IDs, which are compared by
// which span they name.
func TestLeanSpansAreSentAsTheSDKsWould(t *testing.T) {
	sdk, lean := sides(t, sdktrace.ParentBased(sdktrace.AlwaysSample()))
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ts, _ := oteltrace.ParseTraceState("vendor=x")
	caller := oteltrace.NewSpanContext(oteltrace.SpanContextConfig{TraceID: oteltrace.TraceID{0x4b, 0xf9, 1}, SpanID: oteltrace.SpanID{0x0f, 1},
		TraceFlags: oteltrace.FlagsSampled, TraceState: ts, Remote: true})
	many := make([]attribute.KeyValue, 0, 140)
	for i := range 140 {
		many = append(many, attribute.Int(fmt.Sprintf("k%03d", i), i))
	}
	scenario := func(tr oteltrace.Tracer) {
		ctx := oteltrace.ContextWithRemoteSpanContext(context.Background(), caller)
		ctx, req := tr.Start(ctx, "chat tiny", oteltrace.WithSpanKind(oteltrace.SpanKindServer), oteltrace.WithTimestamp(at(0)),
			oteltrace.WithAttributes(attribute.String("gen_ai.request.model", "tiny"), attribute.String("url.path", "/v1/chat/completions")))
		req.SetAttributes(attribute.Int("http.response.status_code", 502), attribute.Bool("b", true), attribute.Float64("f", 0.25),
			attribute.StringSlice("ss", []string{"a", "b"}), attribute.Int64Slice("is", []int64{1, 2}), attribute.BoolSlice("bs", []bool{true}),
			attribute.Float64Slice("fs", []float64{1.5}), attribute.String("", "no key"))
		req.SetAttributes(attribute.Int("http.response.status_code", 200)) // set again: replaced where it is
		req.SetStatus(codes.Error, "the engine failed")
		req.SetStatus(codes.Unset, "") // Error wins over Unset
		_, route := tr.Start(ctx, "route", oteltrace.WithTimestamp(at(1)))
		route.AddEvent("considered", oteltrace.WithTimestamp(at(2)), oteltrace.WithAttributes(attribute.Int("load", 1)))
		route.RecordError(errors.New("tiny-2 is cooling"), oteltrace.WithTimestamp(at(3)))
		route.AddLink(oteltrace.Link{SpanContext: caller, Attributes: []attribute.KeyValue{attribute.String("why", "resumed")}})
		route.AddLink(oteltrace.Link{}) // a link to nothing is no link
		route.SetName("routed")
		route.SetAttributes(many...)
		route.SetAttributes(attribute.Int("k000", -1)) // replaced even when full
		route.End(oteltrace.WithTimestamp(at(4)))
		_, call := tr.Start(ctx, "engine chat", oteltrace.WithSpanKind(oteltrace.SpanKindClient), oteltrace.WithTimestamp(at(4)))
		call.SetStatus(codes.Ok, "ignored: only an error has a description")
		call.SetStatus(codes.Error, "Ok wins")
		call.End(oteltrace.WithTimestamp(at(9)))
		_, root := tr.Start(ctx, "a new root", oteltrace.WithNewRoot(), oteltrace.WithTimestamp(at(9)),
			oteltrace.WithLinks(oteltrace.Link{SpanContext: caller}))
		root.End(oteltrace.WithTimestamp(at(10)))
		req.End(oteltrace.WithTimestamp(at(10)))
		req.End(oteltrace.WithTimestamp(at(20))) // a span ends once
		req.SetAttributes(attribute.String("after", "the end"))
	}
	want, got := sameAsSDK(t, sdk, lean, caller, scenario)
	if len(want) != 4 {
		t.Fatalf("the SDK sent %d spans, want 4", len(want))
	}
	if got["a new root"].TraceId == nil || string(got["a new root"].TraceId) == string(got["chat tiny"].TraceId) {
		t.Error("a span started as a new root shares its parent's trace")
	}
}

// The limits an operator sets in the SDK's variables bound lean spans
// as they bound the SDK's: attributes, events, links and their
// attributes counted, strings cut to the length limit.
func TestLeanSpansKeepTheSDKsLimits(t *testing.T) {
	for k, v := range map[string]string{"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "5", "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "4",
		"OTEL_SPAN_EVENT_COUNT_LIMIT": "2", "OTEL_SPAN_LINK_COUNT_LIMIT": "1", "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT": "1"} {
		t.Setenv(k, v)
	}
	sdk, lean := sides(t, sdktrace.AlwaysSample())
	at := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	caller := oteltrace.NewSpanContext(oteltrace.SpanContextConfig{TraceID: oteltrace.TraceID{7}, SpanID: oteltrace.SpanID{7}, TraceFlags: oteltrace.FlagsSampled})
	want, _ := sameAsSDK(t, sdk, lean, caller, func(tr oteltrace.Tracer) {
		_, span := tr.Start(context.Background(), "limited", oteltrace.WithTimestamp(at), oteltrace.WithLinks(oteltrace.Link{SpanContext: caller}))
		span.SetAttributes(attribute.String("long", "a secret prompt about zebras"), attribute.String("invalid", "ab\xffcd\xfe\xffefgh"),
			attribute.String("wide", "zébrés à rayures"), attribute.StringSlice("list", []string{"ok", "much too long"}),
			attribute.String("short", "tiny"), attribute.Int("past the count", 1))
		span.SetAttributes(attribute.String("long", "set again, when full"))
		for i := range 3 {
			span.AddEvent(fmt.Sprintf("event %d", i), oteltrace.WithTimestamp(at), oteltrace.WithAttributes(attribute.Int("a", i), attribute.Int("b", i)))
		}
		span.AddLink(oteltrace.Link{SpanContext: caller})
		span.End(oteltrace.WithTimestamp(at.Add(time.Millisecond)))
	})
	if sp := want["limited"]; sp == nil || len(sp.Attributes) != 4 || sp.DroppedAttributesCount != 2 || len(sp.Events) != 2 || len(sp.Links) != 1 || sp.DroppedLinksCount != 1 {
		t.Fatalf("the SDK did not keep the limits set: %s", prototext.Format(sp))
	}
}

// sameAsSDK runs scenario through the SDK's tracer and the lean one, and
// fails t where what reached the collector differs: span by span, by
// name, their random IDs compared by which span (or caller's) they name.
// It returns the spans each sent.
func sameAsSDK(t *testing.T, sdk, lean side, caller oteltrace.SpanContext, scenario func(oteltrace.Tracer)) (want, got map[string]*tracepb.Span) {
	t.Helper()
	scenario(sdk.provider.Tracer("modelserve/gateway"))
	scenario(lean.provider.Tracer("modelserve/gateway"))
	want, got = sdk.spans(t), lean.spans(t)
	names := func(m map[string]*tracepb.Span) (ns []string) {
		for n := range m {
			ns = append(ns, n)
		}
		slices.Sort(ns)
		return ns
	}
	if !slices.Equal(names(got), names(want)) {
		t.Fatalf("lean spans sent %v, the SDK %v", names(got), names(want))
	}
	// An ID is told by what it names: the caller's, or one of the spans'.
	label := func(spans map[string]*tracepb.Span) func([]byte) []byte {
		return func(id []byte) []byte {
			switch h := fmt.Sprintf("%x", id); {
			case len(id) == 0:
				return nil
			case h == caller.TraceID().String():
				return []byte("caller's trace")
			case h == caller.SpanID().String():
				return []byte("caller's span")
			}
			for _, n := range names(spans) {
				if string(spans[n].SpanId) == string(id) {
					return []byte("span " + n)
				}
				if string(spans[n].TraceId) == string(id) {
					return []byte("trace of " + n)
				}
			}
			return []byte(fmt.Sprintf("unknown %x", id))
		}
	}
	for _, n := range names(want) {
		w, g := proto.Clone(want[n]).(*tracepb.Span), proto.Clone(got[n]).(*tracepb.Span)
		for _, x := range []struct {
			sp *tracepb.Span
			l  func([]byte) []byte
		}{{w, label(want)}, {g, label(got)}} {
			x.sp.TraceId, x.sp.SpanId, x.sp.ParentSpanId = x.l(x.sp.TraceId), x.l(x.sp.SpanId), x.l(x.sp.ParentSpanId)
			for _, l := range x.sp.Links {
				l.TraceId, l.SpanId = x.l(l.TraceId), x.l(l.SpanId)
			}
		}
		if !proto.Equal(w, g) {
			t.Errorf("span %q differs from the SDK's:\nSDK:  %s\nlean: %s", n, prototext.Format(w), prototext.Format(g))
		}
	}
	// The resource and scope are the SDK's too.
	rs := func(s side) *coltracepb.ExportTraceServiceRequest {
		r := proto.Clone(s.sent.sent[0]).(*coltracepb.ExportTraceServiceRequest)
		for _, x := range r.ResourceSpans {
			for _, ss := range x.ScopeSpans {
				ss.Spans = nil
			}
		}
		return r
	}
	if !proto.Equal(rs(sdk), rs(lean)) {
		t.Errorf("lean spans' resource and scope differ from the SDK's:\nSDK:  %s\nlean: %s", prototext.Format(rs(sdk)), prototext.Format(rs(lean)))
	}
	return want, got
}

// The sampler decides for lean spans as for the SDK's: a span not
// sampled is not recorded, nor sent, but carries its trace on.
func TestLeanSpansFollowTheSampler(t *testing.T) {
	unsampled := oteltrace.NewSpanContext(oteltrace.SpanContextConfig{TraceID: oteltrace.TraceID{1}, SpanID: oteltrace.SpanID{1}, Remote: true})
	for _, c := range []struct {
		name    string
		sampler sdktrace.Sampler
		parent  oteltrace.SpanContext
	}{
		{"always_off", sdktrace.NeverSample(), oteltrace.SpanContext{}},
		{"a caller that does not sample", sdktrace.ParentBased(sdktrace.AlwaysSample()), unsampled},
		{"a ratio of none", sdktrace.TraceIDRatioBased(0), oteltrace.SpanContext{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, lean := sides(t, c.sampler)
			ctx := oteltrace.ContextWithRemoteSpanContext(context.Background(), c.parent)
			_, span := lean.provider.Tracer("t").Start(ctx, "x")
			span.SetAttributes(attribute.String("k", "v"))
			span.End()
			if span.IsRecording() || span.SpanContext().IsSampled() || !span.SpanContext().IsValid() {
				t.Errorf("recording %v, sampled %v, valid %v: want a valid context, not sampled, not recorded",
					span.IsRecording(), span.SpanContext().IsSampled(), span.SpanContext().IsValid())
			}
			if c.parent.IsValid() && span.SpanContext().TraceID() != c.parent.TraceID() {
				t.Error("the span does not carry its caller's trace on")
			}
			if got := lean.spans(t); len(got) != 0 {
				t.Errorf("%d spans were sent", len(got))
			}
		})
	}
}

// A span's record goes back for another span once its batch is sent:
// the first span, told more after its end, changes nothing of the next.
func TestAnEndedLeanSpanCannotTouchTheNext(t *testing.T) {
	_, lean := sides(t, sdktrace.AlwaysSample())
	tr := lean.provider.Tracer("t")
	_, first := tr.Start(context.Background(), "first")
	first.End()
	lean.spans(t) // sent: its record is free again
	_, second := tr.Start(context.Background(), "second", oteltrace.WithAttributes(attribute.String("mine", "yes")))
	first.SetAttributes(attribute.String("mine", "no"), attribute.String("stray", "x"))
	first.SetName("renamed")
	first.SetStatus(codes.Error, "stray")
	first.AddEvent("stray")
	first.End()
	second.End()
	got := lean.spans(t)["second"]
	if got == nil {
		t.Fatal("the second span was not sent")
	}
	if len(got.Attributes) != 1 || got.Attributes[0].GetValue().GetStringValue() != "yes" || len(got.Events) != 0 || got.Status.GetCode() != 0 {
		t.Fatalf("the second span was changed through the first: %s", prototext.Format(got))
	}
}

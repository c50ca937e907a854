package trace

import (
	"context"
	"math"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// uploader sends spans in OTLP's messages to the collector: the OTLP/HTTP
// client, which reads its own OTEL_EXPORTER_OTLP_* headers, timeout,
// compression and certificates, and retries what the protocol says may be
// retried.
type uploader interface {
	Start(context.Context) error
	Stop(context.Context) error
	UploadTraces(context.Context, []*tracepb.ResourceSpans) error
}

// exporter turns finished spans into OTLP's messages and has the client
// send them. It keeps its messages from one batch to the next, filling
// them again: the SDK's own exporter builds four objects for every
// attribute of every span, and was more than half of what a traced
// gateway request allocated. Batches come one at a time (the queue's one
// goroutine); the lock only keeps a stray second caller from sharing the
// messages.
type exporter struct {
	client uploader

	mu      sync.Mutex
	started bool
	// The batch's messages, kept: every span and attribute value made
	// once and filled again by later batches.
	spans  []*span
	values []*value
	scopes []*scopeSpans
	out    []*tracepb.ResourceSpans
	res    *resource.Resource
	resPB  *tracepb.ResourceSpans
	// How many of each the batch being sent uses.
	nspan, nvalue, nscope int
}

// span is one span's message with the storage its ids point into.
type span struct {
	pb                   tracepb.Span
	status               tracepb.Status
	traceID              oteltrace.TraceID
	spanID, parentSpanID oteltrace.SpanID
}

// value is one attribute's message with one of each scalar kind it may
// hold, so that filling it makes nothing.
type value struct {
	kv  commonpb.KeyValue
	any commonpb.AnyValue
	s   commonpb.AnyValue_StringValue
	i   commonpb.AnyValue_IntValue
	b   commonpb.AnyValue_BoolValue
	d   commonpb.AnyValue_DoubleValue
}

// scopeSpans is the spans of one instrumentation scope (one tracer) in
// the batch.
type scopeSpans struct {
	scope instrumentation.Scope
	made  bool
	pb    tracepb.ScopeSpans
}

func newExporter(c uploader) *exporter { return &exporter{client: c} }

func (e *exporter) start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.started = true
	return e.client.Start(ctx)
}

// ExportSpans sends one batch.
func (e *exporter) ExportSpans(ctx context.Context, ss []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.fill(ss)
	if len(out) == 0 {
		return nil
	}
	err := e.client.UploadTraces(ctx, out)
	e.forget()
	return err
}

// Shutdown stops the client.
func (e *exporter) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.started {
		return nil
	}
	e.started = false
	return e.client.Stop(ctx)
}

// fill builds the batch's messages: spans grouped by their resource and
// then by their tracer's scope, as OTLP has them.
func (e *exporter) fill(ss []sdktrace.ReadOnlySpan) []*tracepb.ResourceSpans {
	e.out = e.out[:0]
	e.nspan, e.nvalue, e.nscope = 0, 0, 0
	first := 0 // the current resource's first scope
	var res *resource.Resource
	group := func() {
		if e.nscope == first {
			return
		}
		rs := e.resourceSpans(res)
		for _, sc := range e.scopes[first:e.nscope] {
			rs.ScopeSpans = append(rs.ScopeSpans, &sc.pb)
		}
		e.out = append(e.out, rs)
		first = e.nscope
	}
	for _, sd := range ss {
		if sd == nil {
			continue
		}
		if r := sd.Resource(); r != res {
			group()
			res = r
		}
		sc := e.scope(sd.InstrumentationScope(), first)
		if e.nspan == len(e.spans) {
			e.spans = append(e.spans, new(span))
		}
		s := e.spans[e.nspan]
		e.nspan++
		e.fillSpan(s, sd)
		sc.pb.Spans = append(sc.pb.Spans, &s.pb)
	}
	group()
	return e.out
}

// scope is the batch's group of spans of scope under the current
// resource (whose groups begin at first), begun when it is the first of
// them.
func (e *exporter) scope(scope instrumentation.Scope, first int) *scopeSpans {
	for _, sc := range e.scopes[first:e.nscope] {
		if sc.scope == scope {
			return sc
		}
	}
	if e.nscope == len(e.scopes) {
		e.scopes = append(e.scopes, new(scopeSpans))
	}
	sc := e.scopes[e.nscope]
	e.nscope++
	if !sc.made || sc.scope != scope {
		sc.scope, sc.made = scope, true
		sc.pb.Scope, sc.pb.SchemaUrl = nil, scope.SchemaURL
		if scope != (instrumentation.Scope{}) {
			sc.pb.Scope = &commonpb.InstrumentationScope{Name: scope.Name, Version: scope.Version,
				Attributes: keyValues(scope.Attributes.ToSlice())}
		}
	}
	return sc
}

// resourceSpans is the message of r's spans. One provider makes every
// span, so r is one resource, whose message is made once; another in the
// same batch has its own, made for the batch alone.
func (e *exporter) resourceSpans(r *resource.Resource) *tracepb.ResourceSpans {
	made := func() *tracepb.ResourceSpans {
		rs := &tracepb.ResourceSpans{}
		if r != nil {
			rs.Resource = &resourcepb.Resource{Attributes: keyValues(r.Attributes())}
			rs.SchemaUrl = r.SchemaURL()
		}
		return rs
	}
	if len(e.out) > 0 {
		return made()
	}
	if e.resPB == nil || e.res != r {
		e.res, e.resPB = r, made()
	}
	return e.resPB
}

// fillSpan fills s from sd, its attributes from the batch's values not
// yet used.
func (e *exporter) fillSpan(s *span, sd sdktrace.ReadOnlySpan) {
	sc := sd.SpanContext()
	s.traceID, s.spanID = sc.TraceID(), sc.SpanID()
	p := &s.pb
	p.TraceId, p.SpanId = s.traceID[:], s.spanID[:]
	p.TraceState = sc.TraceState().String()
	p.ParentSpanId = nil
	parent := sd.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		s.parentSpanID = psid
		p.ParentSpanId = s.parentSpanID[:]
	}
	p.Flags = spanFlags(sc.TraceFlags(), parent)
	p.Name = sd.Name()
	p.Kind = spanKind(sd.SpanKind())
	p.StartTimeUnixNano = unixNano(sd.StartTime().UnixNano())
	p.EndTimeUnixNano = unixNano(sd.EndTime().UnixNano())
	st := sd.Status()
	s.status.Message = st.Description
	switch st.Code {
	case codes.Ok:
		s.status.Code = tracepb.Status_STATUS_CODE_OK
	case codes.Error:
		s.status.Code = tracepb.Status_STATUS_CODE_ERROR
	default:
		s.status.Code = tracepb.Status_STATUS_CODE_UNSET
	}
	p.Status = &s.status
	p.Attributes = p.Attributes[:0]
	for _, a := range sd.Attributes() {
		if e.nvalue == len(e.values) {
			v := new(value)
			v.kv.Value = &v.any
			e.values = append(e.values, v)
		}
		v := e.values[e.nvalue]
		e.nvalue++
		v.kv.Key = string(a.Key)
		v.fill(a.Value)
		p.Attributes = append(p.Attributes, &v.kv)
	}
	p.DroppedAttributesCount = clampUint32(sd.DroppedAttributes())
	// Events and links are rare on modelserve's spans (a resumed job's
	// link): made for the batch alone.
	p.Events = nil
	for _, ev := range sd.Events() {
		p.Events = append(p.Events, &tracepb.Span_Event{Name: ev.Name, TimeUnixNano: unixNano(ev.Time.UnixNano()),
			Attributes: keyValues(ev.Attributes), DroppedAttributesCount: clampUint32(ev.DroppedAttributeCount)})
	}
	p.DroppedEventsCount = clampUint32(sd.DroppedEvents())
	p.Links = nil
	for _, l := range sd.Links() {
		tid, sid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		p.Links = append(p.Links, &tracepb.Span_Link{TraceId: tid[:], SpanId: sid[:], TraceState: l.SpanContext.TraceState().String(),
			Attributes: keyValues(l.Attributes), DroppedAttributesCount: clampUint32(l.DroppedAttributeCount),
			Flags: spanFlags(l.SpanContext.TraceFlags(), l.SpanContext)})
	}
	p.DroppedLinksCount = clampUint32(sd.DroppedLinks())
}

// forget lets go of what the batch's messages point to (the spans'
// strings), keeping the messages for the next.
func (e *exporter) forget() {
	for _, s := range e.spans[:e.nspan] {
		clear(s.pb.Attributes)
		s.pb.Attributes = s.pb.Attributes[:0]
		s.pb.Name, s.pb.TraceState, s.status.Message = "", "", ""
		s.pb.Events, s.pb.Links = nil, nil
	}
	for _, v := range e.values[:e.nvalue] {
		v.kv.Key, v.s.StringValue, v.any.Value = "", "", nil
	}
	for _, sc := range e.scopes[:e.nscope] {
		clear(sc.pb.Spans)
		sc.pb.Spans = sc.pb.Spans[:0]
	}
	if e.resPB != nil {
		clear(e.resPB.ScopeSpans)
		e.resPB.ScopeSpans = e.resPB.ScopeSpans[:0]
	}
	clear(e.out)
	e.out = e.out[:0]
}

// fill sets v to a, with no new object for a scalar.
func (v *value) fill(a attribute.Value) {
	switch a.Type() {
	case attribute.STRING:
		v.s.StringValue = a.AsString()
		v.any.Value = &v.s
	case attribute.INT64:
		v.i.IntValue = a.AsInt64()
		v.any.Value = &v.i
	case attribute.BOOL:
		v.b.BoolValue = a.AsBool()
		v.any.Value = &v.b
	case attribute.FLOAT64:
		v.d.DoubleValue = a.AsFloat64()
		v.any.Value = &v.d
	default:
		v.any.Value = anyValue(a).Value
	}
}

// keyValues are attributes as new messages: for what is made once (the
// resource, a scope) or is rare (events, links).
func keyValues(as []attribute.KeyValue) []*commonpb.KeyValue {
	if len(as) == 0 {
		return nil
	}
	out := make([]*commonpb.KeyValue, len(as))
	for i, a := range as {
		out[i] = &commonpb.KeyValue{Key: string(a.Key), Value: anyValue(a.Value)}
	}
	return out
}

// anyValue is a value as a new message, of whatever kind it is.
func anyValue(a attribute.Value) *commonpb.AnyValue {
	av := new(commonpb.AnyValue)
	array := func(n int, at func(int) *commonpb.AnyValue) {
		vs := make([]*commonpb.AnyValue, n)
		for i := range vs {
			vs[i] = at(i)
		}
		av.Value = &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vs}}
	}
	switch a.Type() {
	case attribute.STRING:
		av.Value = &commonpb.AnyValue_StringValue{StringValue: a.AsString()}
	case attribute.INT64:
		av.Value = &commonpb.AnyValue_IntValue{IntValue: a.AsInt64()}
	case attribute.BOOL:
		av.Value = &commonpb.AnyValue_BoolValue{BoolValue: a.AsBool()}
	case attribute.FLOAT64:
		av.Value = &commonpb.AnyValue_DoubleValue{DoubleValue: a.AsFloat64()}
	case attribute.STRINGSLICE:
		s := a.AsStringSlice()
		array(len(s), func(i int) *commonpb.AnyValue {
			return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s[i]}}
		})
	case attribute.INT64SLICE:
		s := a.AsInt64Slice()
		array(len(s), func(i int) *commonpb.AnyValue {
			return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: s[i]}}
		})
	case attribute.BOOLSLICE:
		s := a.AsBoolSlice()
		array(len(s), func(i int) *commonpb.AnyValue {
			return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: s[i]}}
		})
	case attribute.FLOAT64SLICE:
		s := a.AsFloat64Slice()
		array(len(s), func(i int) *commonpb.AnyValue {
			return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: s[i]}}
		})
	case attribute.BYTESLICE:
		av.Value = &commonpb.AnyValue_BytesValue{BytesValue: a.AsByteSlice()}
	case attribute.SLICE:
		s := a.AsSlice()
		array(len(s), func(i int) *commonpb.AnyValue { return anyValue(s[i]) })
	case attribute.MAP:
		av.Value = &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: keyValues(a.AsMap())}}
	case attribute.EMPTY:
	default:
		av.Value = &commonpb.AnyValue_StringValue{StringValue: "INVALID"}
	}
	return av
}

// spanFlags are OTLP's flags of a span: its trace flags, and whether its
// parent is remote.
func spanFlags(tf oteltrace.TraceFlags, parent oteltrace.SpanContext) uint32 {
	flags := uint32(tf) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)
	if parent.IsRemote() {
		flags |= uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
	}
	return flags
}

func spanKind(k oteltrace.SpanKind) tracepb.Span_SpanKind {
	switch k {
	case oteltrace.SpanKindInternal:
		return tracepb.Span_SPAN_KIND_INTERNAL
	case oteltrace.SpanKindClient:
		return tracepb.Span_SPAN_KIND_CLIENT
	case oteltrace.SpanKindServer:
		return tracepb.Span_SPAN_KIND_SERVER
	case oteltrace.SpanKindProducer:
		return tracepb.Span_SPAN_KIND_PRODUCER
	case oteltrace.SpanKindConsumer:
		return tracepb.Span_SPAN_KIND_CONSUMER
	}
	return tracepb.Span_SPAN_KIND_UNSPECIFIED
}

func unixNano(n int64) uint64 { return uint64(max(0, n)) }

func clampUint32(v int) uint32 {
	return uint32(min(max(v, 0), math.MaxUint32))
}

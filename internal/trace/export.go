package trace

import (
	"context"
	"math"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
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

// exporter writes finished spans in OTLP's protobuf encoding itself, into
// a buffer kept from one batch to the next, and has the client send them.
// The SDK's own exporter builds four objects for every attribute of every
// span and then marshals them by reflection: more than half of what a
// traced gateway request allocated, and most of the export's time. Each
// resource's spans go to the client as an empty message carrying them
// already encoded (as its unknown fields, which the client's marshalling
// writes out as they are). Batches come one at a time (the queue's one
// goroutine); the lock only keeps a stray second caller from sharing the
// buffer.
type exporter struct {
	client uploader

	mu      sync.Mutex
	started bool
	buf     []byte
	// The messages that carry the batch, one for each resource (one
	// provider makes every span: one resource).
	carriers []*tracepb.ResourceSpans
	// The batch's resources and one resource's scopes, each in the
	// order first met.
	resources []*resource.Resource
	scopes    []instrumentation.Scope
	// view is the SDK span being written, read once.
	view spanView
}

// maxKeptBuffer bounds the buffer kept for the next batch: a batch of
// spans carrying prompts (--trace-content) may need far more than usual,
// once.
const maxKeptBuffer = 4 << 20

func newExporter(c uploader) *exporter { return &exporter{client: c} }

func (e *exporter) start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.started = true
	return e.client.Start(ctx)
}

// export sends one batch, of the SDK's spans and lean ones alike.
func (e *exporter) export(ctx context.Context, batch []item) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.encode(batch)
	if len(out) == 0 {
		return nil
	}
	err := e.client.UploadTraces(ctx, out)
	for _, rs := range out {
		rs.ProtoReflect().SetUnknown(nil)
	}
	clear(e.resources)
	if cap(e.buf) > maxKeptBuffer {
		e.buf = nil
	}
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

// encode writes the batch: for each resource a message, its spans grouped
// by their tracer's scope, as OTLP has them.
func (e *exporter) encode(ss []item) []*tracepb.ResourceSpans {
	e.buf = e.buf[:0]
	e.resources = e.resources[:0]
	for _, sd := range ss {
		if !containsRes(e.resources, sd.resource()) {
			e.resources = append(e.resources, sd.resource())
		}
	}
	type part struct{ from, to int }
	parts := make([]part, 0, 1)
	for _, r := range e.resources {
		from := len(e.buf)
		if r != nil {
			at := e.open(1) // ResourceSpans.resource
			for _, a := range r.Attributes() {
				e.keyValue(1, a)
			}
			e.close(at)
		}
		e.scopes = e.scopes[:0]
		for _, sd := range ss {
			if sd.resource() == r && !containsScope(e.scopes, sd.scope()) {
				e.scopes = append(e.scopes, sd.scope())
			}
		}
		for _, sc := range e.scopes {
			at := e.open(2) // ResourceSpans.scope_spans
			if sc != (instrumentation.Scope{}) {
				s := e.open(1) // ScopeSpans.scope
				e.str(1, sc.Name)
				e.str(2, sc.Version)
				for _, a := range sc.Attributes.ToSlice() {
					e.keyValue(3, a)
				}
				e.close(s)
			}
			for _, sd := range ss {
				if sd.resource() == r && sd.scope() == sc {
					if sd.lean != nil {
						e.span(&sd.lean.spanView)
					} else {
						e.span(e.viewOf(sd.sdk))
					}
				}
			}
			e.str(3, sc.SchemaURL)
			e.close(at)
		}
		if r != nil {
			e.str(3, r.SchemaURL())
		}
		parts = append(parts, part{from, len(e.buf)})
	}
	// The buffer is whole now (it may have moved as it grew): each
	// resource's carrier is given its part.
	for len(e.carriers) < len(e.resources) {
		e.carriers = append(e.carriers, &tracepb.ResourceSpans{})
	}
	out := e.carriers[:len(e.resources)]
	for i, rs := range out {
		rs.ProtoReflect().SetUnknown(protoreflect.RawFields(e.buf[parts[i].from:parts[i].to]))
	}
	return out
}

func containsRes(rs []*resource.Resource, r *resource.Resource) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

func containsScope(ss []instrumentation.Scope, s instrumentation.Scope) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// spanView is what a span's message is written from: the SDK's span
// read through its methods, or a lean span's record as it is.
type spanView struct {
	name                        string
	kind                        oteltrace.SpanKind
	sc, parent                  oteltrace.SpanContext
	start, end                  time.Time
	attrs                       []attribute.KeyValue
	events                      []sdktrace.Event
	links                       []sdktrace.Link
	status                      sdktrace.Status
	droppedAttrs                int
	droppedEvents, droppedLinks int
}

// viewOf reads an SDK span into the exporter's view, kept for the next.
func (e *exporter) viewOf(sd sdktrace.ReadOnlySpan) *spanView {
	e.view = spanView{name: sd.Name(), kind: sd.SpanKind(), sc: sd.SpanContext(), parent: sd.Parent(), start: sd.StartTime(), end: sd.EndTime(),
		attrs: sd.Attributes(), events: sd.Events(), links: sd.Links(), status: sd.Status(),
		droppedAttrs: sd.DroppedAttributes(), droppedEvents: sd.DroppedEvents(), droppedLinks: sd.DroppedLinks()}
	return &e.view
}

// span writes one ScopeSpans.spans.
func (e *exporter) span(sd *spanView) {
	at := e.open(2)
	sc := sd.sc
	tid, sid := sc.TraceID(), sc.SpanID()
	e.bytes(1, tid[:])
	e.bytes(2, sid[:])
	e.str(3, sc.TraceState().String())
	if psid := sd.parent.SpanID(); psid.IsValid() {
		e.bytes(4, psid[:])
	}
	e.str(5, sd.name)
	e.varint(6, uint64(spanKind(sd.kind)))
	e.fixed64(7, unixNano(sd.start.UnixNano()))
	e.fixed64(8, unixNano(sd.end.UnixNano()))
	for _, a := range sd.attrs {
		e.keyValue(9, a)
	}
	e.varint(10, uint64(clampUint32(sd.droppedAttrs)))
	for _, ev := range sd.events {
		s := e.open(11)
		e.fixed64(1, unixNano(ev.Time.UnixNano()))
		e.str(2, ev.Name)
		for _, a := range ev.Attributes {
			e.keyValue(3, a)
		}
		e.varint(4, uint64(clampUint32(ev.DroppedAttributeCount)))
		e.close(s)
	}
	e.varint(12, uint64(clampUint32(sd.droppedEvents)))
	for _, l := range sd.links {
		s := e.open(13)
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		e.bytes(1, ltid[:])
		e.bytes(2, lsid[:])
		e.str(3, l.SpanContext.TraceState().String())
		for _, a := range l.Attributes {
			e.keyValue(4, a)
		}
		e.varint(5, uint64(clampUint32(l.DroppedAttributeCount)))
		e.fixed32(6, spanFlags(l.SpanContext.TraceFlags(), l.SpanContext))
		e.close(s)
	}
	e.varint(14, uint64(clampUint32(sd.droppedLinks)))
	// The status is always there, as the SDK's exporter sends it.
	st := e.open(15)
	e.str(2, sd.status.Description)
	e.varint(3, uint64(statusCode(sd.status.Code)))
	e.close(st)
	e.fixed32(16, spanFlags(sc.TraceFlags(), sd.parent))
	e.close(at)
}

// keyValue writes a as a KeyValue, field f. A scalar's lengths are
// known before it is written, and go first; a list or a map is measured
// as it is written (open, close).
func (e *exporter) keyValue(f protowire.Number, a attribute.KeyValue) {
	var value int // the AnyValue's length
	switch a.Value.Type() {
	case attribute.STRING:
		value = 1 + protowire.SizeBytes(len(a.Value.AsString()))
	case attribute.BOOL:
		value = 2
	case attribute.INT64:
		value = 1 + protowire.SizeVarint(uint64(a.Value.AsInt64()))
	case attribute.FLOAT64:
		value = 9
	default:
		at := e.open(f)
		e.str(1, string(a.Key))
		v := e.open(2)
		e.value(a.Value)
		e.close(v)
		e.close(at)
		return
	}
	n := 1 + protowire.SizeBytes(value)
	if a.Key != "" {
		n += 1 + protowire.SizeBytes(len(a.Key))
	}
	e.buf = protowire.AppendTag(e.buf, f, protowire.BytesType)
	e.buf = protowire.AppendVarint(e.buf, uint64(n))
	e.str(1, string(a.Key))
	e.buf = protowire.AppendTag(e.buf, 2, protowire.BytesType)
	e.buf = protowire.AppendVarint(e.buf, uint64(value))
	e.value(a.Value)
}

// value writes an AnyValue's fields: the one its kind is, written even
// when zero (a oneof says which it holds).
func (e *exporter) value(v attribute.Value) {
	switch v.Type() {
	case attribute.STRING:
		e.buf = protowire.AppendTag(e.buf, 1, protowire.BytesType)
		e.buf = protowire.AppendString(e.buf, v.AsString())
	case attribute.BOOL:
		e.buf = protowire.AppendTag(e.buf, 2, protowire.VarintType)
		e.buf = protowire.AppendVarint(e.buf, protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		e.buf = protowire.AppendTag(e.buf, 3, protowire.VarintType)
		e.buf = protowire.AppendVarint(e.buf, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		e.buf = protowire.AppendTag(e.buf, 4, protowire.Fixed64Type)
		e.buf = protowire.AppendFixed64(e.buf, math.Float64bits(v.AsFloat64()))
	case attribute.BYTESLICE:
		e.buf = protowire.AppendTag(e.buf, 7, protowire.BytesType)
		e.buf = protowire.AppendBytes(e.buf, v.AsByteSlice())
	case attribute.MAP:
		at := e.open(6)
		for _, a := range v.AsMap() {
			e.keyValue(1, a)
		}
		e.close(at)
	case attribute.EMPTY:
	case attribute.STRINGSLICE, attribute.INT64SLICE, attribute.BOOLSLICE, attribute.FLOAT64SLICE, attribute.SLICE:
		at := e.open(5)
		each := func(v attribute.Value) {
			s := e.open(1)
			e.value(v)
			e.close(s)
		}
		switch v.Type() {
		case attribute.STRINGSLICE:
			for _, x := range v.AsStringSlice() {
				each(attribute.StringValue(x))
			}
		case attribute.INT64SLICE:
			for _, x := range v.AsInt64Slice() {
				each(attribute.Int64Value(x))
			}
		case attribute.BOOLSLICE:
			for _, x := range v.AsBoolSlice() {
				each(attribute.BoolValue(x))
			}
		case attribute.FLOAT64SLICE:
			for _, x := range v.AsFloat64Slice() {
				each(attribute.Float64Value(x))
			}
		default:
			for _, x := range v.AsSlice() {
				each(x)
			}
		}
		e.close(at)
	default:
		e.buf = protowire.AppendTag(e.buf, 1, protowire.BytesType)
		e.buf = protowire.AppendString(e.buf, "INVALID")
	}
}

// open begins a message field f, its length a byte to be filled in by
// close; it says where the message's bytes begin.
func (e *exporter) open(f protowire.Number) int {
	e.buf = protowire.AppendTag(e.buf, f, protowire.BytesType)
	e.buf = append(e.buf, 0)
	return len(e.buf)
}

// close ends the message begun at start, writing its length; a length of
// more than one byte moves the message along to make its room.
func (e *exporter) close(start int) {
	n := len(e.buf) - start
	if n < 0x80 {
		e.buf[start-1] = byte(n)
		return
	}
	k := protowire.SizeVarint(uint64(n))
	e.buf = append(e.buf, make([]byte, k-1)...)
	copy(e.buf[start+k-1:], e.buf[start:start+n])
	protowire.AppendVarint(e.buf[:start-1], uint64(n))
}

// str, bytes, varint, fixed32 and fixed64 write a field, left out when
// zero, as proto3 leaves it out.
func (e *exporter) str(f protowire.Number, s string) {
	if s != "" {
		e.buf = protowire.AppendTag(e.buf, f, protowire.BytesType)
		e.buf = protowire.AppendString(e.buf, s)
	}
}

func (e *exporter) bytes(f protowire.Number, b []byte) {
	e.buf = protowire.AppendTag(e.buf, f, protowire.BytesType)
	e.buf = protowire.AppendBytes(e.buf, b)
}

func (e *exporter) varint(f protowire.Number, v uint64) {
	if v != 0 {
		e.buf = protowire.AppendTag(e.buf, f, protowire.VarintType)
		e.buf = protowire.AppendVarint(e.buf, v)
	}
}

func (e *exporter) fixed32(f protowire.Number, v uint32) {
	if v != 0 {
		e.buf = protowire.AppendTag(e.buf, f, protowire.Fixed32Type)
		e.buf = protowire.AppendFixed32(e.buf, v)
	}
}

func (e *exporter) fixed64(f protowire.Number, v uint64) {
	if v != 0 {
		e.buf = protowire.AppendTag(e.buf, f, protowire.Fixed64Type)
		e.buf = protowire.AppendFixed64(e.buf, v)
	}
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

func statusCode(c codes.Code) tracepb.Status_StatusCode {
	switch c {
	case codes.Ok:
		return tracepb.Status_STATUS_CODE_OK
	case codes.Error:
		return tracepb.Status_STATUS_CODE_ERROR
	}
	return tracepb.Status_STATUS_CODE_UNSET
}

func unixNano(n int64) uint64 { return uint64(max(0, n)) }

func clampUint32(v int) uint32 {
	return uint32(min(max(v, 0), math.MaxUint32))
}

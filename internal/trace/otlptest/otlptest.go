// Package otlptest is an OTLP/HTTP trace receiver for tests: it decodes what
// the exporter sends with the collector's own protobuf types and keeps the
// spans, for a test to look at.
package otlptest

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, its attributes as strings.
type Span struct {
	Name, TraceID, SpanID, ParentID string
	Service                         string
	Kind                            string
	Attrs                           map[string]string
	Links                           []string // trace ids
	StatusError                     bool
	StatusMessage                   string
	// Start and End are when the span began and ended, in nanoseconds
	// since the Unix epoch.
	Start, End uint64
}

// Receiver is a running receiver. URL is its traces endpoint.
type Receiver struct {
	URL string
	mu  sync.Mutex
	got []Span
}

// Start runs a receiver until the test ends.
func Start(t testing.TB) *Receiver {
	r := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL = srv.URL + "/v1/traces"
	return r
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 64<<20))
	if err != nil || req.URL.Path != "/v1/traces" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	var msg collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var spans []Span
	for _, rs := range msg.ResourceSpans {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				service = value(a.Value)
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := Span{Name: s.Name, TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
					ParentID: hex.EncodeToString(s.ParentSpanId), Service: service, Kind: s.Kind.String(), Attrs: map[string]string{},
					StatusError: s.GetStatus().GetCode() == 2, StatusMessage: s.GetStatus().GetMessage(),
					Start: s.StartTimeUnixNano, End: s.EndTimeUnixNano}
				for _, a := range s.Attributes {
					sp.Attrs[a.Key] = value(a.Value)
				}
				for _, l := range s.Links {
					sp.Links = append(sp.Links, hex.EncodeToString(l.TraceId))
				}
				spans = append(spans, sp)
			}
		}
	}
	r.mu.Lock()
	r.got = append(r.got, spans...)
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Write(out)
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return itoa(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	case *commonpb.AnyValue_DoubleValue:
		return ftoa(x.DoubleValue)
	}
	return v.String()
}

// Spans is every span received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.got...)
}

// WaitFor waits (up to 20s) for a span named name and returns it; the test
// fails if none arrives.
func (r *Receiver) WaitFor(t testing.TB, name string) Span {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range r.Spans() {
			if s.Name == name {
				return s
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no span %q arrived; got %v", name, names(r.Spans()))
	return Span{}
}

func names(ss []Span) []string {
	var n []string
	for _, s := range ss {
		n = append(n, s.Name)
	}
	return n
}

package trace_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"modelserve/internal/trace"
	"modelserve/internal/trace/otlptest"
)

func TestALogLineInASpanCarriesItsIDs(t *testing.T) {
	rcv := otlptest.Start(t)
	tr, err := trace.New(env(map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rcv.URL}), trace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	var buf bytes.Buffer
	log := slog.New(trace.LogHandler(slog.NewJSONHandler(&buf, nil))).With("part", "gateway")
	ctx, span := tr.Tracer("t").Start(context.Background(), "x")
	log.WarnContext(ctx, "inside")
	span.End()
	log.Warn("outside")

	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	var in, out map[string]any
	json.Unmarshal(lines[0], &in)
	json.Unmarshal(lines[1], &out)
	if in["trace_id"] != span.SpanContext().TraceID().String() || in["span_id"] != span.SpanContext().SpanID().String() || in["part"] != "gateway" {
		t.Errorf("line inside the span %v; want its trace_id and span_id", in)
	}
	if _, ok := out["trace_id"]; ok {
		t.Errorf("line outside any span has a trace_id: %v", out)
	}
}

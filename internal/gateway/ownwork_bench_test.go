package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/auth"
	"modelserve/internal/fleet"
	"modelserve/internal/trace"
)

// BenchmarkOwnWork: the gateway's own time and allocations per request,
// one at a time, against an engine stand-in that answers at once with
// llama.cpp's shapes (a plain answer with usage and timings; a stream of
// eight tokens, its counts and [DONE]). The real engine's milliseconds
// would drown the microseconds measured here; BenchmarkOverhead measures
// the gateway beside the real engine. The gateway's cost is its line less
// direct's, in time, bytes and allocations per request; tracing's, traced
// less gateway. The CPU time of each (cpu), taken request by request
// taking turns in one run, says the same on a machine busy with
// other work: the gateway's own CPU per request with tracing on against
// off (tracing_cpu_ratio: against an engine that answers at once, so the
// largest it can be) and what tracing adds (tracing_cpu_us), its export
// included.
func BenchmarkOwnWork(b *testing.B) {
	plain := []byte(`{"choices":[{"finish_reason":"length","index":0,"message":{"role":"assistant","content":"Hello there, how are"}}],` +
		`"created":1764600000,"model":"tiny","system_fingerprint":"b11669","object":"chat.completion",` +
		`"usage":{"completion_tokens":8,"prompt_tokens":12,"total_tokens":20},"id":"chatcmpl-x",` +
		`"timings":{"cache_n":4,"prompt_n":8,"prompt_ms":1.2,"predicted_n":8,"predicted_ms":2.5}}`)
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Stream bool }
		_ = json.NewDecoder(r.Body).Decode(&req)
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			w.Header().Set("Content-Length", fmt.Sprint(len(plain)))
			w.Write(plain)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := range 8 {
			fmt.Fprintf(w, "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"content\":\"tok%d\"}}],\"created\":1764600000,\"id\":\"chatcmpl-x\",\"model\":\"tiny\",\"object\":\"chat.completion.chunk\"}\n\n", i)
			rc.Flush()
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"completion_tokens\":8,\"prompt_tokens\":12},\"timings\":{\"cache_n\":4,\"prompt_n\":8,\"predicted_n\":8,\"predicted_ms\":2.5}}\n\ndata: [DONE]\n\n")
	}))
	defer engine.Close()
	rep := fleet.Replica{ID: "tiny-1", Model: "tiny", Endpoint: engine.URL, Load: &fleet.Load{Size: catalog.Size{Slots: 4}}}
	f := &stubFleet{ready: []fleet.Replica{rep}}
	g, err := New(Options{Catalog: oneModel{"tiny"}, Fleet: f, Tokens: anyToken{}})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/", g.Forward)
	gw := httptest.NewServer(mux)
	defer gw.Close()

	// The same, traced: every request sampled, its spans exported to a
	// collector that keeps nothing.
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	defer col.Close()
	tr, err := trace.New(func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": col.URL + "/v1/traces", "OTEL_TRACES_SAMPLER": "always_on"}[k]
	}, trace.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	tg, err := New(Options{Catalog: oneModel{"tiny"}, Fleet: f, Tokens: anyToken{}, Tracer: tr.HotTracer("modelserve/gateway"), Propagator: tr.Propagator})
	if err != nil {
		b.Fatal(err)
	}
	defer tg.Close()
	tmux := http.NewServeMux()
	tmux.HandleFunc("POST /v1/", tg.Forward)
	traced := httptest.NewServer(tmux)
	defer traced.Close()

	for _, stream := range []bool{false, true} {
		body, _ := json.Marshal(map[string]any{"model": "tiny", "max_tokens": 8, "stream": stream,
			"messages": []map[string]string{{"role": "system", "content": strings.Repeat("You are helpful. ", 20)}, {"role": "user", "content": "Say hello."}}})
		sides := []struct{ name, url string }{{"direct", engine.URL}, {"gateway", gw.URL}, {"traced", traced.URL}}
		for _, side := range sides {
			b.Run(fmt.Sprintf("stream=%v/%s", stream, side.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := call(side.url+"/v1/chat/completions", "k", body); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		b.Run(fmt.Sprintf("stream=%v/cpu", stream), func(b *testing.B) {
			var cpu [3]time.Duration
			n := 0
			for b.Loop() {
				// Each side goes first, second and third in turn: what one
				// request's goroutines finish after its answer is counted
				// with the next, so each side follows each equally.
				for k := range sides {
					i := (n + k) % len(sides)
					side := sides[i]
					c := cpuTime()
					if _, err := call(side.url+"/v1/chat/completions", "k", body); err != nil {
						b.Fatal(err)
					}
					if side.name == "traced" && n%flushEvery == flushEvery-1 {
						tr.Flush(context.Background())
					}
					cpu[i] += cpuTime() - c
				}
				n++
			}
			own := func(i int) float64 { return (cpu[i] - cpu[0]).Seconds() / float64(n) }
			b.ReportMetric(own(1)*1e6, "gateway_cpu_us")
			b.ReportMetric(own(2)*1e6, "traced_cpu_us")
			b.ReportMetric((own(2)-own(1))*1e6, "tracing_cpu_us")
			b.ReportMetric(own(2)/own(1), "tracing_cpu_ratio")
		})
	}
}

// flushEvery is how many traced requests' spans the CPU rounds export at
// once, their export counted with the traced side.
const flushEvery = 64

// oneModel is a catalog of one model, by name.
type oneModel struct{ name string }

func (c oneModel) List(context.Context) ([]catalog.Model, error) {
	return []catalog.Model{{Name: c.name}}, nil
}

// anyToken takes every token as one that may do everything.
type anyToken struct{}

func (anyToken) Check(context.Context, string) (auth.Token, error) {
	return auth.Token{Name: "bench"}, nil
}

package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"modelserve/internal/ggufgen"
	"modelserve/internal/trace"
)

// BenchmarkTracingOverhead: the gateway with tracing on (every request
// sampled, exported to a collector on loopback) against the same gateway
// with tracing off, over the same replica, in one run. Reported: on/off
// throughput (goal ≥ 0.97) and the p50 tracing adds (goal < 0.2 ms), and
// what a machine busy with other work still measures fairly: the CPU
// time this process spends per request, on against off (cpu_ratio; the
// process is the load's client and the gateway, not the engine), and
// what tracing adds to it (added_cpu_us), its export included.
func BenchmarkTracingOverhead(b *testing.B) {
	e := mustEnv(b, Options{MaxQueue: 256})
	m := chatModel(b, "tiny", ggufgen.Spec{})
	m.Profiles[0].Pool, m.Profiles[0].Slots = 4096, 4
	m.Profiles[0].RAMBytes = 0
	e.mustAdd(m)
	e.waitServing("tiny", 1)

	// A collector that takes every export and keeps nothing, as a real
	// one on another machine costs this process nothing: decoding and
	// keeping the spans here (otlptest) would be counted as tracing's
	// cost.
	var exports atomic.Int64
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n, _ := io.Copy(io.Discard, r.Body); n > 0 {
			exports.Add(1)
		}
	}))
	defer col.Close()
	tr, err := trace.New(func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": col.URL + "/v1/traces", "OTEL_TRACES_SAMPLER": "always_on"}[k]
	}, trace.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	// The same gateway as the untraced one, figures included, but for
	// its tracer.
	traced, err := New(Options{Catalog: e.cat, Fleet: e.fleet, Tokens: e.tokens, MaxQueue: 256, Metrics: prometheus.NewRegistry(),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Tracer: tr.Tracer("modelserve/gateway"), Propagator: tr.Propagator})
	if err != nil {
		b.Fatal(err)
	}
	defer traced.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/", traced.Forward)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, stream := range []bool{false, true} {
		body, _ := json.Marshal(map[string]any{"model": "tiny", "max_tokens": 8, "stream": stream,
			"messages": []map[string]string{{"role": "user", "content": "Say hello."}}})
		off := func(int) (string, string, []byte) { return e.url + "/v1/chat/completions", e.token, body }
		on := func(int) (string, string, []byte) { return srv.URL + "/v1/chat/completions", e.token, body }
		for _, conc := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("stream=%v/conc=%d", stream, conc), func(b *testing.B) {
				n := max(conc*16, b.N)
				runLoad(b, conc, conc, off) // warm the connections
				runLoad(b, conc, conc, on)
				fa, ft, fcpu, na, nt, ncpu := alternateCPU(b, n, conc, off, on, func() { tr.Flush(context.Background()) })
				b.ReportMetric(float64(len(na))/nt.Seconds()/(float64(len(fa))/ft.Seconds()), "throughput_ratio")
				b.ReportMetric(float64(quantile(na, .5, took)-quantile(fa, .5, took))/1e6, "added_p50_ms")
				b.ReportMetric(float64(len(fa))/ft.Seconds(), "off_req/s")
				offCPU, onCPU := fcpu.Seconds()/float64(len(fa)), ncpu.Seconds()/float64(len(na))
				b.ReportMetric(onCPU/offCPU, "cpu_ratio")
				b.ReportMetric((onCPU-offCPU)*1e6, "added_cpu_us")
			})
		}
	}
	if exports.Load() == 0 {
		// Spans go in batches a second apart: one more wait, then a
		// benchmark that exported nothing measured nothing.
		time.Sleep(1500 * time.Millisecond)
		if exports.Load() == 0 {
			b.Fatal("tracing on exported no spans: the benchmark measured tracing off twice")
		}
	}
}

// alternateCPU is alternate, counting also the CPU time this process
// spends in each side's turns. flush, after each of y's turns, exports
// what y's requests traced, so the export's work counts with them.
func alternateCPU(b *testing.B, n, conc int, x, y func(i int) (url, key string, body []byte), flush func()) (
	xa []answer, xt, xcpu time.Duration, ya []answer, yt, ycpu time.Duration) {
	b.Helper()
	turn := max(conc*2, n/turns)
	for done := 0; done < n; done += turn {
		c := cpuTime()
		a, t := runLoad(b, turn, conc, x)
		xa, xt, xcpu = append(xa, a...), xt+t, xcpu+cpuTime()-c
		c = cpuTime()
		a, t = runLoad(b, turn, conc, y)
		flush()
		ya, yt, ycpu = append(ya, a...), yt+t, ycpu+cpuTime()-c
	}
	return xa, xt, xcpu, ya, yt, ycpu
}

// cpuTime is the user and system time this process has used: unlike
// the wall clock, barely moved by other processes on a busy machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

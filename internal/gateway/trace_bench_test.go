package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"modelserve/catalog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	oteltrace "go.opentelemetry.io/otel/trace"

	"modelserve/internal/fleet"
	"modelserve/internal/trace"
)

// BenchmarkTracingOverhead: the gateway with tracing on (every request
// sampled, exported to a collector on loopback) against the same gateway
// with tracing off, over the same replica, in one run. Reported: on/off
// throughput (goal ≥ 0.97; sliced_throughput_ratio is its measure, with
// its standard error, sliced_ratio_se, and the low end of its 95%
// interval, sliced_ratio_low95), the p50 tracing adds (goal
// < 0.2 ms), and what a machine busy with other work still measures
// fairly: the CPU time this process spends per request, on against off
// (cpu_ratio; the process is the load's client and the gateway, not the
// engine), what tracing adds to it (added_cpu_us), its export included,
// and the share of the machine's CPU left idle meanwhile
// (idle_cpu_share).
//
// The two gateways' p50s, each measured in turns of its own, say little
// beyond 1 client: at 64 clients on 4 slots a request's p50 is its wait
// in the queue, by Little's law conc/throughput (64/470 req/s ≈ 136 ms),
// and throughput moves by a few percent from one turn to the next with
// nothing traced differently, so added_p50_ms moved by ±10 ms there.
// together_paired_added_ms is the p50 goal's measure: sampled and
// unsampled requests through the traced gateway at once, in one queue, in
// pairs sent at the same moment, and the median of what the sampled one
// of each pair took beyond the other. The engine is the bound here: its
// one thread (--threads 1) takes a core, and a fifth to a third of the
// machine's CPU stays idle (idle_cpu_share) at 8 and 64 clients, so
// tracing's CPU is not taken from the engine's. With -benchtime 1x a turn
// is 2·conc requests and each is flushed, so at 1 client an export is
// paid for every 2 requests (not every 128, a batch's 512 spans), and
// added_cpu_us there is mostly that.
func BenchmarkTracingOverhead(b *testing.B) {
	e, _ := benchEnv(b)

	// Every request of the turns is sampled: it carries no traceparent
	// and starts a trace of its own. together's carry one that says
	// whether they are.
	//
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
		return map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": col.URL + "/v1/traces", "OTEL_TRACES_SAMPLER": "parentbased_always_on"}[k]
	}, trace.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	traced, srv := gatewayTracedBy(b, e, tr.HotTracer("modelserve/gateway"), tr.Propagator)
	// And one whose tracing is switched on and off under one load
	// (sliced): the throughput goal's measure.
	st := &switchedTracer{real: tr.HotTracer("modelserve/gateway")}
	switched, ssrv := gatewayTracedBy(b, e, st, tr.Propagator)

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
				idle := machineIdle()
				f, o := alternateCPU(b, n, conc, off, on, func() { tr.Flush(context.Background()) }, e.gw, traced)
				b.ReportMetric(idle(), "idle_cpu_share")
				x, y := together(b, n, conc, srv.URL+"/v1/chat/completions", e.token, body)
				tr.Flush(context.Background())
				dropIdle(e.gw, traced)

				sw := func(int) (string, string, []byte) { return ssrv.URL + "/v1/chat/completions", e.token, body }
				warm, _ := runLoad(b, conc*4, conc, sw)
				sliced(b, st.on.Store, conc, sliceLength(warm), sw, func() { tr.Flush(context.Background()) }).report(b)
				dropIdle(switched)
				b.ReportMetric(float64(quantile(y, .5, took)-quantile(x, .5, took))/1e6, "together_added_p50_ms")
				b.ReportMetric(float64(pairedAdded(x, y))/1e6, "together_paired_added_ms")
				b.ReportMetric(o.rate()/f.rate(), "throughput_ratio")
				b.ReportMetric(float64(quantile(o.answers, .5, took)-quantile(f.answers, .5, took))/1e6, "added_p50_ms")
				b.ReportMetric(pairedRatio(f, o), "paired_throughput_ratio")
				b.ReportMetric(float64(pairedP50(f, o))/1e6, "paired_added_p50_ms")
				b.ReportMetric(f.rate(), "off_req/s")
				offCPU, onCPU := f.cpu.Seconds()/float64(len(f.answers)), o.cpu.Seconds()/float64(len(o.answers))
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

// gatewayTracedBy is a gateway like e's, figures included, but for its
// tracer, serving /v1/ until the benchmark ends.
func gatewayTracedBy(b *testing.B, e *env, t oteltrace.Tracer, p propagation.TextMapPropagator) (*Gateway, *httptest.Server) {
	b.Helper()
	g, err := New(Options{Catalog: e.cat, Fleet: e.fleet, Tokens: e.tokens, MaxQueue: 256, Metrics: prometheus.NewRegistry(),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Tracer: t, Propagator: p})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(g.Close)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/", g.Forward)
	srv := httptest.NewServer(mux)
	b.Cleanup(srv.Close)
	return g, srv
}

// together sends 2n requests to the traced gateway at url, conc at a
// time, in pairs sent at the same moment: one of each carries a caller's
// traceparent that is sampled (ys), the other one that is not (xs). Both
// kinds wait in one queue under one load at once, and what the sampled
// one of a pair took beyond the other is what tracing added to it. Two
// gateways side by side at once would not say it: with queues of their
// own, the clients are shared out between them as their waits drift
// apart, and at 64 clients one queue's p50 drifted 7 ms from the other's
// with nothing traced differently.
func together(b *testing.B, n, conc int, url, key string, body []byte) (xs, ys []answer) {
	b.Helper()
	out, _ := runLoadWith(b, 2*n, conc, func(int) (string, string, []byte) { return url, key, body }, func(i int) []string {
		flags := "00"
		if sampled(i) {
			flags = "01"
		}
		return []string{"traceparent", fmt.Sprintf("00-%016x%016x-%016x-%s", rand.Uint64(), rand.Uint64()|1, rand.Uint64()|1, flags)}
	})
	for i, a := range out {
		if sampled(i) {
			ys = append(ys, a)
		} else {
			xs = append(xs, a)
		}
	}
	return xs, ys
}

// pairedAdded is the median of what each of ys took beyond the x sent
// beside it (together's pairs).
func pairedAdded(xs, ys []answer) time.Duration {
	ds := make([]time.Duration, min(len(xs), len(ys)))
	for i := range ds {
		ds[i] = ys[i].took - xs[i].took
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// sampled is whether together's request i is sampled: one of each pair
// (2k, 2k+1), the second in even pairs and the first in odd ones, as the
// first of a pair is sent a moment sooner.
func sampled(i int) bool { return i%2 == 1 != (i/2%2 == 1) }

// machineCPU is the CPU seconds the machine has spent busy and idle, from
// /proc/stat; 0 where it cannot be read.
func machineCPU() (busy, idle float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		if i == 3 || i == 4 { // idle, iowait
			idle += v / 100 // USER_HZ
		} else {
			busy += v / 100
		}
	}
	return busy, idle
}

// machineIdle reads the machine's CPU time from now on: the share of it
// idle until the function it returns is called, or -1 where /proc/stat
// cannot be read.
func machineIdle() func() float64 {
	busy0, idle0 := machineCPU()
	return func() float64 {
		busy1, idle1 := machineCPU()
		all := busy1 + idle1 - busy0 - idle0
		if all <= 0 {
			return -1
		}
		return (idle1 - idle0) / all
	}
}

// alternateCPU is alternate, counting also the CPU time this process
// spends in each side's turns. flush, after each of y's turns, exports
// what y's requests traced, so the export's work counts with them. The
// sides swap places every other round (x y, y x, x y, ...), so what one
// turn leaves the next (the engine's kept connections, garbage to
// collect) falls on each side alike: in a fixed order, with tracing off
// on both sides, the second measured 0.93 to 0.97 of the first's
// throughput at 64 clients, whichever gateway it was; swapping, 0.98 to
// 1.04 either way. The connections each side keeps are closed after
// each of its turns (dropIdle, gs the gateways measured).
func alternateCPU(b *testing.B, n, conc int, x, y func(i int) (url, key string, body []byte), flush func(), gs ...*Gateway) (xs, ys sideRun) {
	b.Helper()
	turn := max(conc*2, n/turns)
	run := func(s *sideRun, to func(i int) (url, key string, body []byte), after func()) {
		c := cpuTime()
		a, t := runLoad(b, turn, conc, to)
		after()
		s.answers, s.took, s.cpu = append(s.answers, a...), s.took+t, s.cpu+cpuTime()-c
		s.turns = append(s.turns, turnRun{answers: a, took: t})
		dropIdle(gs...)
	}
	for round := 0; round*turn < n || round%2 == 1; round++ {
		if round%2 == 0 {
			run(&xs, x, func() {})
			run(&ys, y, flush)
		} else {
			run(&ys, y, flush)
			run(&xs, x, func() {})
		}
	}
	return xs, ys
}

// sideRun is what one side of alternateCPU measured: every answer, the
// wall and CPU time of its turns, and each turn alone.
type sideRun struct {
	answers   []answer
	took, cpu time.Duration
	turns     []turnRun
}

type turnRun struct {
	answers []answer
	took    time.Duration
}

func (s sideRun) rate() float64 { return float64(len(s.answers)) / s.took.Seconds() }

// pairedRatio and pairedP50 compare y with x round by round, a turn of
// each taken side by side, and say the median of the rounds: y's
// throughput over x's, and what y adds to x's p50. A slow moment of a
// busy machine falls in one round and moves one of the medians' many
// values, where in the whole it moved the one figure: the two sides'
// turns of a round ran within a second of each other.
func pairedRatio(x, y sideRun) float64 {
	rs := make([]float64, 0, len(x.turns))
	for i := range min(len(x.turns), len(y.turns)) {
		xt, yt := x.turns[i], y.turns[i]
		rs = append(rs, float64(len(yt.answers))/yt.took.Seconds()/(float64(len(xt.answers))/xt.took.Seconds()))
	}
	slices.Sort(rs)
	return rs[len(rs)/2]
}

func pairedP50(x, y sideRun) time.Duration {
	ds := make([]time.Duration, 0, len(x.turns))
	for i := range min(len(x.turns), len(y.turns)) {
		ds = append(ds, quantile(y.turns[i].answers, .5, took)-quantile(x.turns[i].answers, .5, took))
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
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

// BenchmarkTraceHooks: the tracing of one gateway request alone, without
// its HTTP: the request's span, the routing decision (and, queued, the
// wait for a slot), the engine call's span with the trace passed on, the
// answer's figures, and the export of the spans to a collector that keeps
// nothing. Its time and allocations per request are tracing's own, free
// of the network and the engine that BenchmarkOwnWork's traced side also
// measures.
func BenchmarkTraceHooks(b *testing.B) {
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	defer col.Close()
	tr, err := trace.New(func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": col.URL + "/v1/traces", "OTEL_TRACES_SAMPLER": "always_on"}[k]
	}, trace.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	rep := fleet.Replica{ID: "tiny-1", Model: "tiny", Node: "local", Endpoint: "http://127.0.0.1:9", Load: &fleet.Load{Size: catalog.Size{Slots: 4}}}
	g, err := New(Options{Catalog: oneModel{"tiny"}, Fleet: &stubFleet{ready: []fleet.Replica{rep}}, Tokens: anyToken{},
		Tracer: tr.HotTracer("modelserve/gateway"), Propagator: tr.Propagator})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	for _, queued := range []bool{false, true} {
		b.Run(fmt.Sprintf("queued=%v", queued), func(b *testing.B) {
			in := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			up := httptest.NewRequest(http.MethodPost, rep.Endpoint+"/v1/chat/completions", nil)
			b.ReportAllocs()
			n := 0
			cpu := cpuTime()
			for b.Loop() {
				start := time.Now()
				r, span := g.startRequest(in, "tiny")
				ctx := r.Context()
				var wait waitTrace
				tw := g.startWait(&wait, ctx, "tiny", nil, false, nil)
				if queued {
					tw.queued(3, 1)
				}
				// What the pool says of the candidates when asked to explain.
				c := choice{replica: rep, why: onlyReplica, load: 1, loads: []string{rep.ID + " " + strconv.Itoa(1) + "/" + strconv.Itoa(depthOf(rep))}}
				tw.routed(c, 1)
				call := g.startCall(ctx, up.URL.Path, up.Header, "tiny", rep, "")
				call.end(ctx, http.StatusOK, start, time.Now(), counts{prompt: 12, cached: 4, completion: 8})
				span.End()
				if n++; n%flushEvery == 0 {
					tr.Flush(context.Background())
				}
			}
			tr.Flush(context.Background())
			// The CPU a request's tracing costs this process, the
			// export's goroutine and the garbage collector included: what
			// the gateway's cores lose to it under load.
			b.ReportMetric(float64(cpuTime()-cpu)/1e3/float64(b.N), "cpu_us/op")
		})
	}
}

package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/ggufgen"
	"modelserve/internal/llamatest"
)

// The benchmarks measure the gateway against the engine it fronts, in the
// same run: the ratios are the figures, not the absolute times, which
// depend on the machine.

// benchClient sends the benchmarks' requests: keep-alive connections
// enough for the highest concurrency, never through a proxy.
var benchClient = func() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy, tr.MaxIdleConnsPerHost = nil, 256
	return &http.Client{Transport: tr}
}()

// answer is what a benchmark reads of one request.
type answer struct {
	took, first time.Duration
	promptN     int
	cacheN      int
}

// officialHeaders are those the official OpenAI Go client sends with a
// chat request, streamed or not (Accept too), as the gateway and the
// engine see them from an application.
var officialHeaders = map[string]string{
	"Accept": "application/json", "Content-Type": "application/json", "User-Agent": "OpenAI/Go 3.99.0",
	"X-Stainless-Arch": "x64", "X-Stainless-Lang": "go", "X-Stainless-Os": "Linux", "X-Stainless-Package-Version": "3.99.0",
	"X-Stainless-Retry-Count": "0", "X-Stainless-Runtime": "go", "X-Stainless-Runtime-Version": "go1.26",
}

// call sends body to url with key and reads the whole answer; for a stream,
// first is when the first event arrived.
func call(url, key string, body []byte) (answer, error) { return callWith(url, key, body) }

// callWith is call with more headers, given as name, value, ...
func callWith(url, key string, body []byte, header ...string) (answer, error) {
	start := time.Now()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	for k, v := range officialHeaders {
		req.Header.Set(k, v)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header["X-Idempotency-Key"] = nil // the gateway may close a kept connection: a POST is sent again on a new one
	resp, err := benchClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	var a answer
	var all bytes.Buffer
	buf := make([]byte, 16<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 && a.first == 0 {
			a.first = time.Since(start)
		}
		all.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			return a, err
		}
	}
	a.took = time.Since(start)
	if resp.StatusCode != http.StatusOK {
		return a, fmt.Errorf("%s: %d %s", url, resp.StatusCode, all.String())
	}
	t := tally{stream: isEventStream(resp.Header.Get("Content-Type"))}
	t.feed(all.Bytes())
	if c := t.counts(); c.prompt > 0 {
		a.promptN, a.cacheN = c.prompt-c.cached, c.cached
	}
	return a, nil
}

// run sends n requests, conc at a time, each to target(i), and returns
// their answers and the wall time.
func runLoad(b *testing.B, n, conc int, target func(i int) (url, key string, body []byte)) ([]answer, time.Duration) {
	b.Helper()
	return runLoadWith(b, n, conc, target, nil)
}

// runLoadWith is runLoad, request i sending the headers header(i) (name,
// value, ...) besides; header may be nil.
func runLoadWith(b *testing.B, n, conc int, target func(i int) (url, key string, body []byte), header func(i int) []string) ([]answer, time.Duration) {
	b.Helper()
	out := make([]answer, n)
	next := make(chan int)
	var wg sync.WaitGroup
	var failed sync.Once
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				url, key, body := target(i)
				var h []string
				if header != nil {
					h = header(i)
				}
				a, err := callWith(url, key, body, h...)
				if err != nil {
					failed.Do(func() { b.Error(err) })
				}
				out[i] = a
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return out, time.Since(start)
}

// alternate sends n requests to each of two targets, conc at a time, in
// turns of a few rounds each: a slow moment of a busy machine falls on
// both alike, where in two halves one of them took most of it and the
// ratio moved by a third from one run to the next. A turn is two rounds
// at least, so that at 64 clients the ramp at its start and end is not
// most of it; which side goes first swaps every round (alternateCPU).
func alternate(b *testing.B, n, conc int, x, y func(i int) (url, key string, body []byte), gs ...*Gateway) (xs, ys sideRun) {
	b.Helper()
	return alternateCPU(b, n, conc, x, y, func() {}, gs...)
}

// dropIdle closes the connections the benchmarks' client and the
// gateways gs keep: done after each turn, so that no side's turn begins
// with the engine's HTTP threads held by the connections the side before
// it keeps. llama-server serves a kept connection on one thread of its
// --threads-http until it has been idle for 5 s, and the gateway's
// connections and the direct side's together are more than it has: the
// side that went second waited for threads the first one's idle
// connections held, and at 8 clients modelserve measured an eighth of
// the engine's throughput in one run of the router benchmark.
func dropIdle(gs ...*Gateway) {
	benchClient.CloseIdleConnections()
	for _, g := range gs {
		g.engines.mu.Lock()
		g.engines.dropIdleLocked()
		g.engines.mu.Unlock()
	}
}

// turns is how many turns alternate takes at least.
const turns = 16

func quantile(as []answer, q float64, of func(answer) time.Duration) time.Duration {
	ds := make([]time.Duration, len(as))
	for i, a := range as {
		ds[i] = of(a)
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

func took(a answer) time.Duration  { return a.took }
func first(a answer) time.Duration { return a.first }

// BenchmarkOverhead: throughput and latency through the gateway against
// straight to the engine, at 1, 8 and 64 requests at once, plain and
// streaming. Reported: gateway/direct throughput (goal ≥ 0.95; measured
// in turns, and at 1 client in one unbroken load switched between the
// two, sliced_throughput_ratio with its standard error) and the p50 and p99
// the gateway adds; for plain answers at 1 and 8, the same
// two of a bare TCP relay (floor_...), the part of it any hop costs, and
// at 1 its sliced ratio too (sliced_floor_ratio).
func BenchmarkOverhead(b *testing.B) {
	e, rep := benchEnv(b)
	key := e.fleet.EngineKey(rep.ID)
	dials := countDials(e.gw)
	relay := tcpRelay(b, rep.Endpoint)
	for _, stream := range []bool{false, true} {
		body, _ := json.Marshal(map[string]any{"model": "tiny", "max_tokens": 8, "stream": stream,
			"messages": []map[string]string{{"role": "user", "content": "Say hello."}}})
		direct := func(int) (string, string, []byte) { return rep.Endpoint + "/v1/chat/completions", key, body }
		gateway := func(int) (string, string, []byte) { return e.url + "/v1/chat/completions", e.token, body }
		relayed := func(int) (string, string, []byte) { return relay + "/v1/chat/completions", key, body }
		for _, conc := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("stream=%v/conc=%d", stream, conc), func(b *testing.B) {
				n := max(conc*16, b.N)
				runLoad(b, conc, conc, gateway) // warm the connections
				runLoad(b, conc, conc, direct)
				dialed := dials.Load()
				d, g := alternate(b, n, conc, direct, gateway, e.gw)
				da, dt, ga, gt := d.answers, d.took, g.answers, g.took
				b.ReportMetric(float64(dials.Load()-dialed)/float64(len(ga))*100, "engine_dials_per_100")
				b.ReportMetric(float64(quantile(ga, 1, took))/1e6, "gateway_max_ms")
				b.ReportMetric(float64(quantile(da, 1, took))/1e6, "direct_max_ms")
				b.ReportMetric(float64(len(ga))/gt.Seconds()/(float64(len(da))/dt.Seconds()), "throughput_ratio")
				b.ReportMetric(float64(quantile(ga, .5, took)-quantile(da, .5, took))/1e6, "added_p50_ms")
				b.ReportMetric(pairedRatio(d, g), "paired_throughput_ratio")
				b.ReportMetric(float64(pairedP50(d, g))/1e6, "paired_added_p50_ms")
				b.ReportMetric(float64(quantile(ga, .99, took)-quantile(da, .99, took))/1e6, "added_p99_ms")
				b.ReportMetric(float64(len(da))/dt.Seconds(), "direct_req/s")
				if conc == 1 {
					// The throughput ratio as one unbroken load measures
					// it, the client sent to the gateway and to the engine
					// in turns of slices (sliced): the turns' own figures
					// moved by a tenth from one run to the next. One
					// client only: with more, the connections kept to the
					// engine by the clients and by the gateway together
					// are more than its HTTP threads (dropIdle), and the
					// side asking it directly waited for threads the
					// other's idle connections held.
					var via atomic.Bool
					either := func(i int) (string, string, []byte) {
						if via.Load() {
							return gateway(i)
						}
						return direct(i)
					}
					sliced(b, via.Store, conc, sliceLength(ga), either, func() {}).report(b)
					if !stream {
						// The floor in the same measure: the TCP relay
						// switched with the engine alone, as the gateway
						// was. Its turns moved from 0.95 to 1.01 between
						// runs.
						floor := func(i int) (string, string, []byte) {
							if via.Load() {
								return relayed(i)
							}
							return direct(i)
						}
						ratio, se := sliced(b, via.Store, conc, sliceLength(ga), floor, func() {}).ratio()
						b.ReportMetric(ratio, "sliced_floor_ratio")
						b.ReportMetric(se, "sliced_floor_se")
					}
				}
				if stream {
					b.ReportMetric(float64(quantile(ga, .5, first)-quantile(da, .5, first))/1e6, "added_ttft_p50_ms")
				} else if conc < 64 {
					// The floor: what a hop that only copies bytes costs,
					// in turns with the engine alone as the gateway was.
					d, r := alternate(b, n, conc, direct, relayed, e.gw)
					b.ReportMetric(pairedRatio(d, r), "floor_throughput_ratio")
					b.ReportMetric(float64(pairedP50(d, r))/1e6, "floor_added_p50_ms")
				}
			})
		}
	}
}

// BenchmarkOwnLogic: the gateway beside a bare net/http handler that
// relays each request through the gateway's own engine client, one
// client at a time, each in turns with the engine alone, and each sliced
// with it (sliced_bare_ratio, sliced_gateway_ratio). The bare relay
// is net/http's server and the hop without the gateway's logic (the
// token, the catalog, the fleet's holds, the queue, the metrics): the
// gap between the two is what that logic costs a request.
func BenchmarkOwnLogic(b *testing.B) {
	e, rep := benchEnv(b)
	key := e.fleet.EngineKey(rep.ID)
	host, _ := hostOf(rep.Endpoint)
	ec := newEngineClient()
	bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(r.Body, r.ContentLength, 1<<20)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		resp, err := ec.do(r.Context(), &engineRequest{host: host, target: r.URL.EscapedPath(), key: key, body: body})
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		_, _, _ = relay(w, resp, nil, false, "")
	}))
	defer bare.Close()
	defer ec.closeIdle()
	body, _ := json.Marshal(map[string]any{"model": "tiny", "max_tokens": 8,
		"messages": []map[string]string{{"role": "user", "content": "Say hello."}}})
	direct := func(int) (string, string, []byte) { return rep.Endpoint + "/v1/chat/completions", key, body }
	relayed := func(int) (string, string, []byte) { return bare.URL + "/v1/chat/completions", key, body }
	gateway := func(int) (string, string, []byte) { return e.url + "/v1/chat/completions", e.token, body }
	n := max(16, b.N)
	runLoad(b, 1, 1, relayed) // warm the connections
	runLoad(b, 1, 1, gateway)
	d, r := alternate(b, n, 1, direct, relayed, e.gw)
	d2, g := alternate(b, n, 1, direct, gateway, e.gw)
	b.ReportMetric(pairedRatio(d, r), "bare_throughput_ratio")
	b.ReportMetric(float64(pairedP50(d, r))/1e6, "bare_added_p50_ms")
	b.ReportMetric(pairedRatio(d2, g), "gateway_throughput_ratio")
	b.ReportMetric(float64(pairedP50(d2, g))/1e6, "gateway_added_p50_ms")
	// The same two sliced, each switched with the engine alone in one
	// unbroken load: the turns' ratios move by a few hundredths between
	// runs, more than the gap between the two.
	for _, side := range []struct {
		name   string
		target func(int) (string, string, []byte)
	}{{"bare", relayed}, {"gateway", gateway}} {
		var via atomic.Bool
		either := func(i int) (string, string, []byte) {
			if via.Load() {
				return side.target(i)
			}
			return direct(i)
		}
		ratio, se := sliced(b, via.Store, 1, sliceLength(r.answers), either, func() {}).ratio()
		b.ReportMetric(ratio, "sliced_"+side.name+"_ratio")
		b.ReportMetric(se, "sliced_"+side.name+"_se")
	}
}

// benchEnv is the gateway benchmarks' world: the real fleet and engine,
// one replica of a tiny chat model with four slots and no memory asked,
// ready.
func benchEnv(b *testing.B) (*env, fleet.Replica) {
	b.Helper()
	e := mustEnv(b, Options{MaxQueue: 256})
	m := chatModel(b, "tiny", ggufgen.Spec{})
	m.Profiles[0].Pool, m.Profiles[0].Slots = 4096, 4
	m.Profiles[0].RAMBytes = 0
	e.mustAdd(m)
	return e, e.waitServing("tiny", 1)[0]
}

// tcpRelay is a hop in front of the engine at endpoint that copies bytes
// both ways and reads none of them: the least a gateway can cost, which
// says how much of what the gateway adds is the hop's and how much its
// own. It stops with the benchmark.
func tcpRelay(b *testing.B, endpoint string) (url string) {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	track := func(c net.Conn, on bool) {
		mu.Lock()
		defer mu.Unlock()
		if on {
			open[c] = true
		} else {
			delete(open, c)
		}
	}
	b.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for c := range open {
			c.Close()
		}
	})
	host, _ := hostOf(endpoint)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", host)
				if err != nil {
					return
				}
				defer up.Close()
				track(c, true)
				track(up, true)
				defer track(c, false)
				defer track(up, false)
				go func() { io.Copy(up, c); up.Close() }()
				io.Copy(c, up)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// countDials counts the connections g opens to engines from now on: each
// is a handshake, and a thread of the engine's held while it is kept.
func countDials(g *Gateway) *atomic.Int64 {
	var n atomic.Int64
	dial := g.engines.dial
	g.engines.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		n.Add(1)
		return dial(ctx, network, addr)
	}
	return &n
}

// BenchmarkPrefixAffinity: 16 tenants, each with its own long system
// prompt, over 4 replicas of one slot each, sent round-robin straight to
// the engines and through the gateway. Reported: the share of prompt
// tokens the engines took from their prompt cache (timings.cache_n) and
// the mean time to first token, for both.
func BenchmarkPrefixAffinity(b *testing.B) {
	e := mustEnv(b, Options{MaxQueue: 256})
	for _, name := range []string{"rr", "aff"} {
		m := chatModel(b, name, ggufgen.Spec{})
		m.ContextLength = 4096
		m.Profiles[0].Pool, m.Profiles[0].Slots = 4096, 1
		m.Profiles[0].RAMBytes = 0
		m.Scaling = catalog.Scaling{Min: 4, Max: 4}
		e.mustAdd(m)
	}
	rr := e.waitServing("rr", 4)
	e.waitServing("aff", 4)

	// A system prompt of about 2,000 tokens per tenant: the tiny model's
	// vocabulary has few words, so most characters are a token each.
	rng := rand.New(rand.NewPCG(1, 2))
	const tenants, rounds = 16, 4
	systems := make([]string, tenants)
	for i := range systems {
		var sb strings.Builder
		fmt.Fprintf(&sb, "Tenant %d. ", i)
		for sb.Len() < 1900 {
			sb.WriteByte(byte('a' + rng.IntN(26)))
		}
		systems[i] = sb.String()
	}
	order := make([]int, 0, tenants*rounds)
	for range rounds {
		order = append(order, rng.Perm(tenants)...)
	}
	bodies := func(model string) [][]byte {
		out := make([][]byte, len(order))
		for i, t := range order {
			out[i], _ = json.Marshal(map[string]any{"model": model, "max_tokens": 1, "messages": []map[string]string{
				{"role": "system", "content": systems[t]}, {"role": "user", "content": fmt.Sprintf("question %d", i)}}})
		}
		return out
	}
	rrBodies, affBodies := bodies("rr"), bodies("aff")
	for b.Loop() {
		ra, _ := runLoad(b, len(order), affinityConc, func(i int) (string, string, []byte) {
			r := rr[i%len(rr)]
			return r.Endpoint + "/v1/chat/completions", e.fleet.EngineKey(r.ID), rrBodies[i]
		})
		ga, _ := runLoad(b, len(order), affinityConc, func(i int) (string, string, []byte) {
			return e.url + "/v1/chat/completions", e.token, affBodies[i]
		})
		// The first round fills the caches either way: counted from the
		// second.
		skip := tenants
		b.ReportMetric(reuse(ra[skip:]), "roundrobin_cache_reuse")
		b.ReportMetric(reuse(ga[skip:]), "gateway_cache_reuse")
		b.ReportMetric(meanMS(ra[skip:]), "roundrobin_ttft_ms")
		b.ReportMetric(meanMS(ga[skip:]), "gateway_ttft_ms")
	}
}

func reuse(as []answer) float64 {
	var cached, all int
	for _, a := range as {
		cached += a.cacheN
		all += a.cacheN + a.promptN
	}
	return float64(cached) / float64(max(all, 1))
}

func meanMS(as []answer) float64 {
	var sum time.Duration
	for _, a := range as {
		sum += a.took
	}
	return float64(sum) / float64(len(as)) / 1e6
}

// BenchmarkColdStart: from the first request for a model loaded on demand
// to its first token, less what the engine takes by itself to load the
// same model with the fleet's flags (started by hand and asked /health
// every 5 ms). Reported: the
// difference, modelserve's own part of a cold start (goal < 200 ms).
func BenchmarkColdStart(b *testing.B) {
	e := mustEnv(b, Options{})
	m := chatModel(b, "cold", ggufgen.Spec{})
	m.Profiles[0].RAMBytes = 0
	m.Scaling = catalog.Scaling{Min: 0, Max: 1}

	var engineLoad, coldFirst time.Duration
	n := 0
	for b.Loop() {
		// The engine by itself.
		start := time.Now()
		url, cmd := llamatest.Start(b, append(fleet.EngineArgs(m, m.Profiles[0], m.Source, "", 1), "--api-key", "k")...)
		for {
			resp, err := benchClient.Get(url + "/health")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		engineLoad += time.Since(start)
		llamatest.Stop(cmd)

		// Through modelserve: a fresh entry, asked for once.
		m.Name = fmt.Sprintf("cold-%d", n)
		e.mustAdd(m)
		body, _ := json.Marshal(map[string]any{"model": m.Name, "max_tokens": 1, "stream": true,
			"messages": []map[string]string{{"role": "user", "content": "hi"}}})
		a, err := call(e.url+"/v1/chat/completions", e.token, body)
		if err != nil {
			b.Fatal(err)
		}
		coldFirst += a.first
		if err := e.cat.Remove(context.Background(), m.Name); err != nil {
			b.Fatal(err)
		}
		waitGone(b, e.fleet, m.Name)
		n++
	}
	b.ReportMetric(float64(coldFirst)/float64(n)/1e6, "cold_first_token_ms")
	b.ReportMetric(float64(engineLoad)/float64(n)/1e6, "engine_load_ms")
	b.ReportMetric(float64(coldFirst-engineLoad)/float64(n)/1e6, "modelserve_part_ms")
}

func waitGone(b *testing.B, f *fleet.Fleet, model string) {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		gone := true
		for _, r := range f.Replicas() {
			gone = gone && r.Model != model
		}
		if gone {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatalf("%s's replica did not stop", model)
}

// affinityConc is how many tenants' requests are in flight at once: one
// per replica. A request whose replica's one slot is busy waits for it
// while its load is within the bound, rather than read its prefix again
// on an idle one: measured at 98% reuse against round-robin's 50%, with
// the mean time to first token less than half.
const affinityConc = 4

// BenchmarkCanaryOverhead: what the canary split and the meters cost a
// request, against a model with no canary in the same run, with the same
// engine (one tiny model of 4 slots each), plain and streaming. "split" has
// a canary of share one in a million, so every request is counted by the
// split and lands on the model; "canary" a canary of share 1, so every
// request goes to the canary and its answer is renamed; both with meters
// running on the model and the canary. Reported: throughput against the
// model with no canary and the p50 added (goal: 1 and 0, within the run's
// noise, a few percent on a busy two-core machine), and, timed alone, the
// gateway's own work per request for the split decision and the meters
// (measured: 0.6 µs and 0.08 µs with a canary, against 0.1 µs and 0.03 µs
// without, for requests of milliseconds).
func BenchmarkCanaryOverhead(b *testing.B) {
	e := mustEnv(b, Options{MaxQueue: 256})
	tiny := func(name string) catalog.Model {
		m := chatModel(b, name, ggufgen.Spec{})
		m.Profiles[0].Pool, m.Profiles[0].Slots = 4096, 4
		m.Profiles[0].RAMBytes = 0
		return m
	}
	canary := func(of string, share float64) catalog.Model {
		m := tiny(catalog.CanaryName(of, canaryCommit))
		m.Canary = &catalog.Canary{Of: of, Share: share}
		return m
	}
	e.mustAdd(tiny("base"))
	e.mustAdd(tiny("split"))
	e.mustAdd(canary("split", 1e-6))
	moved := tiny("moved")
	moved.Scaling = catalog.Scaling{Min: 0, Max: 1} // every request goes to its canary: no replica of its own
	e.mustAdd(moved)
	e.mustAdd(canary("moved", 1))
	for _, name := range []string{"base", "split", catalog.CanaryName("split", canaryCommit), catalog.CanaryName("moved", canaryCommit)} {
		e.waitServing(name, 1)
	}
	for _, name := range []string{"split", "moved", catalog.CanaryName("split", canaryCommit), catalog.CanaryName("moved", canaryCommit)} {
		defer e.gw.Measure(name).Stop()
	}

	for _, stream := range []bool{false, true} {
		bodies := map[string][]byte{}
		for _, model := range []string{"base", "split", "moved"} {
			bodies[model], _ = json.Marshal(map[string]any{"model": model, "max_tokens": 8, "stream": stream,
				"messages": []map[string]string{{"role": "user", "content": "Say hello."}}})
		}
		to := func(model string) func(int) (string, string, []byte) {
			return func(int) (string, string, []byte) { return e.url + "/v1/chat/completions", e.token, bodies[model] }
		}
		for _, conc := range []int{1, 16} {
			b.Run(fmt.Sprintf("stream=%v/conc=%d", stream, conc), func(b *testing.B) {
				n := max(conc*4, b.N)
				for _, model := range []string{"base", "split", "moved"} {
					runLoad(b, conc, conc, to(model)) // warm the connections
				}
				answers := map[string][]answer{}
				wall := map[string]time.Duration{}
				// Alternating thirds, so a slow moment of the machine
				// falls on all three.
				for range 2 {
					for _, model := range []string{"base", "split", "moved"} {
						a, t := runLoad(b, n/2, conc, to(model))
						answers[model], wall[model] = append(answers[model], a...), wall[model]+t
					}
				}
				rate := func(model string) float64 { return float64(len(answers[model])) / wall[model].Seconds() }
				p50 := func(model string) time.Duration { return quantile(answers[model], .5, took) }
				b.ReportMetric(rate("split")/rate("base"), "split_throughput_ratio")
				b.ReportMetric(rate("moved")/rate("base"), "canary_throughput_ratio")
				b.ReportMetric(float64(p50("split")-p50("base"))/1e6, "split_added_p50_ms")
				b.ReportMetric(float64(p50("moved")-p50("base"))/1e6, "canary_added_p50_ms")
				b.ReportMetric(rate("base"), "base_req/s")
			})
		}
	}

	// The gateway's own work, alone (ns/op): the split's decision for a
	// model with no canary and for one with a canary (catalog cache, the
	// canary's replicas, the count), and the end of a request counted with
	// no meter and with two running.
	for _, name := range []string{"base", "split"} {
		m, ok, err := e.gw.names.lookup(context.Background(), name)
		if err != nil || !ok {
			b.Fatal(name, " is not in the catalog: ", err)
		}
		b.Run("decision/"+name, func(b *testing.B) {
			for b.Loop() {
				e.gw.canaryFor(m)
			}
		})
	}
	for _, name := range []string{"base", "split"} {
		now := time.Now()
		end := ending{model: name, replica: name + "-1", status: 200, start: now, first: now.Add(time.Millisecond),
			end: now.Add(2 * time.Millisecond), stream: true, counts: counts{completion: 8}}
		b.Run("meters/"+name, func(b *testing.B) {
			for b.Loop() {
				e.gw.meters.add(end)
			}
		})
	}
}

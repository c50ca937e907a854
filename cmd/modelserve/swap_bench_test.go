package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"modelserve/internal/fleet"
	"modelserve/internal/testkit"
)

// BenchmarkThreeModelsInMemoryForOne: three tiny models on demand in
// memory for one, 300 requests in random order from 8 clients, through
// the real binary and the real engine. Every request is to be answered (one
// that is not fails the benchmark), and none is to wait longer than the
// answers queued ahead of it plus one swap.
//
// The queue is modelserve's, so its order is modelserve's: a request is
// ahead of another when it arrived first (its access log line's time,
// which is the arrival the gateway queues it by), and it is queued ahead
// until it is done (that time plus the line's duration). A request's wait
// is from its arrival to its sending to a replica, as its answer's
// Server-Timing says; its answer, after that, is the engine's. By the
// clients' clocks the order was not modelserve's: eight clients send at
// once after each answer, and a request written up to 4 ms before another
// reached modelserve after it.
//
// One swap is the one it waited for: the engine's part, from giving back
// room for its model (the fleet's log) to the model's replica being ready
// (its history), plus modelserve's own part as a swap alone had it (the
// rest of that swap's wait: the decision before, the admission after).
// It is at least the longest swap alone: under load the engine's part
// took up to a third longer than alone, and the bound is to catch a
// request that waited for more than one swap, not a slower one.
//
// It reports the errors, the longest wait as the clients saw it (from
// writing a request to its answer), the longest the kernel and the
// clients took to hand a request to modelserve, and the most any request
// went past its bound (≤ 0: every one within); it fails when a request
// was not answered, or went half a swap past its bound: it waited for a
// second swap.
func BenchmarkThreeModelsInMemoryForOne(b *testing.B) {
	s, c, data := startSwapWorld(b, "alpha", "beta", "gamma")
	models := []string{"alpha", "beta", "gamma"}

	// One swap, alone: each request asks for the model not loaded.
	var alone []sent
	for i, model := range []string{"alpha", "beta", "gamma", "alpha", "beta"} {
		a, err := askSeen(c, model, fmt.Sprintf("swap %d alone", i))
		if err != nil {
			b.Fatalf("the swap to %s alone: %v", model, err)
		}
		if i > 0 { // the first is a cold start, not a swap
			alone = append(alone, sent{asked: a, model: model, end: time.Now()})
		}
	}
	var swap, own time.Duration // a swap alone; modelserve's own part of it
	s.placeInQueue(b, alone)
	aloneSwaps := s.settledSwaps(b, data)
	for _, r := range alone {
		sp, ok := waitedFor(aloneSwaps, r)
		if !ok {
			b.Fatalf("the fleet's log tells of no swap for the request for %s alone", r.model)
		}
		swap = max(swap, r.wait())
		own = max(own, r.wait()-sp.ready.Sub(sp.from))
	}

	const (
		clients  = 8
		requests = 300
		bound    = 90 * time.Second // the whole run's, well above what it takes
	)
	// A connection for each client, its own, made before the run: what
	// the clients see is then the requests' and not their dials'.
	conns := make([]openai.Client, clients)
	var warm sync.WaitGroup
	for i := range conns {
		conns[i] = ownClient(s)
		warm.Go(func() {
			if err := askModel(conns[i], "beta", "warm"); err != nil {
				b.Errorf("warming the clients' connections: %v", err)
			}
		})
	}
	warm.Wait()
	b.ResetTimer()
	for range b.N {
		swapsBefore := s.evictions()
		var (
			mu   sync.Mutex
			all  []sent
			wg   sync.WaitGroup
			next = make(chan int, requests)
		)
		for i := range requests {
			next <- i
		}
		close(next)
		deadline := time.Now().Add(bound)
		for _, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					if time.Now().After(deadline) {
						return
					}
					r := sent{model: models[rand.N(len(models))]}
					r.asked, r.err = askSeen(c, r.model, fmt.Sprintf("request %d", i))
					r.end = time.Now()
					mu.Lock()
					all = append(all, r)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		b.StopTimer()

		var failed []string
		var answered []sent
		for _, r := range all {
			if r.err == nil {
				answered = append(answered, r)
				continue
			}
			var apiErr *openai.Error
			if errors.As(r.err, &apiErr) {
				r.err = fmt.Errorf("%d %s", apiErr.StatusCode, apiErr.RawJSON())
			}
			failed = append(failed, r.model+": "+r.err.Error())
		}
		s.placeInQueue(b, answered)
		slices.SortFunc(answered, func(x, y sent) int { return x.arrived.Compare(y.arrived) })
		swaps := s.settledSwaps(b, data)
		var slowest time.Duration
		for _, w := range swaps {
			slowest = max(slowest, w.ready.Sub(w.from))
		}
		var longest, handing, over time.Duration
		var worst sent
		var worstAhead time.Time
		over = -time.Hour
		for i, r := range answered {
			longest = max(longest, r.end.Sub(r.written))
			handing = max(handing, r.arrived.Sub(r.written))
			ahead := r.arrived
			for j, q := range answered {
				if j != i && q.arrived.Before(r.arrived) && q.done.After(r.arrived) {
					ahead = later(ahead, q.done)
				}
			}
			one := swap
			if sp, ok := waitedFor(swaps, r); ok {
				one = max(one, sp.ready.Sub(sp.from)+own)
			}
			if d := r.sentOn().Sub(ahead.Add(one)); d > over {
				over, worst, worstAhead = d, r, ahead
			}
		}
		starts := s.evictions() - swapsBefore
		sp, _ := waitedFor(swaps, worst)
		b.Logf("%d requests from %d clients, %d errors, %d swaps; longest wait %s (%s in modelserve's hands); one swap alone %s "+
			"(modelserve's own part %s); most past its bound (the answers ahead of it and one swap) %s, by a request for %s that "+
			"waited %s from the last answer ahead of it (the swap it waited for %s); the kernel and the clients took up to %s to hand "+
			"a request to modelserve", len(all), clients, len(failed), starts, longest.Round(time.Millisecond),
			answered[slices.IndexFunc(answered, func(r sent) bool { return r.end.Sub(r.written) == longest })].wait().Round(time.Millisecond),
			swap.Round(time.Millisecond), own.Round(100*time.Microsecond), over.Round(100*time.Microsecond), worst.model,
			worst.sentOn().Sub(worstAhead).Round(100*time.Microsecond), sp.ready.Sub(sp.from).Round(time.Millisecond),
			handing.Round(100*time.Microsecond))
		if over > 0 {
			// Who went before it, and what the fleet did meanwhile, for
			// whoever looks into why (go test -v: without it a
			// benchmark's log is cut after ten lines).
			ms := func(t time.Time) time.Duration { return t.Sub(worst.arrived).Round(100 * time.Microsecond) }
			b.Logf("  from its arrival: the last answer ahead of it ended +%s, the swap it waited for began +%s and was ready +%s, "+
				"it was sent to its replica +%s", ms(worstAhead), ms(sp.from), ms(sp.ready), ms(worst.sentOn()))
			for _, q := range answered {
				if q.arrived.After(worst.arrived) && q.sentOn().Before(worst.sentOn()) && q.sentOn().After(worstAhead) {
					b.Logf("  went before it: %s, come %s after it, sent to its replica %s before it", q.model,
						q.arrived.Sub(worst.arrived).Round(100*time.Microsecond), worst.sentOn().Sub(q.sentOn()).Round(100*time.Microsecond))
				}
			}
			for _, l := range s.fleetLines(worst.arrived, worst.sentOn().Add(20*time.Millisecond)) {
				b.Logf("  meanwhile: %s", l)
			}
		}
		b.ReportMetric(float64(len(failed)), "errors")
		b.ReportMetric(float64(longest.Milliseconds()), "longest-wait-ms")
		b.ReportMetric(float64(swap.Milliseconds()), "one-swap-ms")
		b.ReportMetric(float64(slowest.Milliseconds()), "slowest-swap-in-run-ms")
		b.ReportMetric(float64(over)/float64(time.Millisecond), "past-bound-ms")
		b.ReportMetric(float64(starts), "swaps")
		if len(all) < requests {
			b.Errorf("only %d of %d requests were sent within %s", len(all), requests, bound)
		}
		if len(failed) > 0 {
			b.Errorf("%d of %d requests failed; the first: %s", len(failed), len(all), failed[0])
		}
		if over > swap/2 {
			// A few milliseconds past is the machine's scheduling; half a
			// swap past is a request that waited for a second one.
			b.Errorf("a request for %s went %s past its bound: it waited for more than one swap (one alone took %s)",
				worst.model, over.Round(100*time.Microsecond), swap.Round(time.Millisecond))
		}
		b.StartTimer()
	}
}

// sent is one request of the benchmark: what its client saw (asked, and
// when its answer ended) and modelserve's access log says.
type sent struct {
	asked
	model string
	end   time.Time
	err   error
	// arrived and done are when modelserve had it and was done with it.
	arrived, done time.Time
}

// wait is how long it waited in modelserve for a replica, as its answer's
// Server-Timing says.
func (r sent) wait() time.Duration { return r.timing["wait"] }

// sentOn is when modelserve sent it to a replica.
func (r sent) sentOn() time.Time { return r.arrived.Add(r.wait()) }

// placeInQueue sets when modelserve had each request and was done with
// it, by its access log: of the lines for the request's connection (its
// remote), the one that arrived nearest to when the request was written,
// and not after its answer ended. A connection's requests are one after
// another, so no other comes as near.
func (s *apiServer) placeInQueue(b *testing.B, rs []sent) {
	type line struct{ arrived, done time.Time }
	byRemote := map[string][]line{}
	for _, l := range s.timedLines() {
		d, err := time.ParseDuration(logField(l.rest, "duration"))
		if err != nil || !strings.Contains(l.rest, " msg=request ") {
			continue
		}
		remote := logField(l.rest, "remote")
		byRemote[remote] = append(byRemote[remote], line{arrived: l.at, done: l.at.Add(d)})
	}
	for i := range rs {
		r := &rs[i]
		best := time.Duration(-1)
		for _, l := range byRemote[r.local] {
			if l.arrived.After(r.end) {
				continue
			}
			if d := l.arrived.Sub(r.written); best < 0 || d.Abs() < best {
				best, r.arrived, r.done = d.Abs(), l.arrived, l.done
			}
		}
		if best < 0 {
			b.Fatalf("modelserve's access log has no line for a request from %s", r.local)
		}
		if _, ok := r.timing["wait"]; !ok {
			b.Fatalf("the answer to a request for %s said no wait (Server-Timing)", r.model)
		}
	}
}

// swapSpan is a swap the fleet made: from giving back room for model to
// the model's new replica being ready.
type swapSpan struct {
	model       string
	from, ready time.Time
}

// swaps are the swaps the fleet's log tells of, in the order they ended.
// A replica is ready when the fleet's history says (ready, to the
// nanosecond), else as long after its placing as its "replica ready"
// line's took says (to the millisecond, from its engine's start rather
// than its placing): the line itself is written a moment later, once the
// requests that waited for it have reached it.
func (s *apiServer) swaps(ready map[string]time.Time) []swapSpan {
	var out []swapSpan
	giving := map[string]time.Time{} // model: when room began to be given back for it
	placed := map[string]time.Time{} // replica: when it was placed
	for _, l := range s.timedLines() {
		t, rest := l.at, l.rest
		if !strings.Contains(rest, "part=fleet") {
			continue
		}
		switch {
		case strings.Contains(rest, `msg="giving back replicas to make room"`):
			if m := logField(rest, "model"); m != "" {
				if _, ok := giving[m]; !ok {
					giving[m] = t
				}
			}
		case strings.Contains(rest, `msg="placing a replica"`):
			placed[logField(rest, "replica")] = t
		case strings.Contains(rest, `msg="replica ready"`):
			rep := logField(rest, "replica")
			i := strings.LastIndexByte(rep, '-')
			took, err := time.ParseDuration(logField(rest, "took"))
			at, ok := placed[rep]
			if i <= 0 || err != nil || !ok {
				continue
			}
			end, ok := ready[rep]
			if !ok {
				end = at.Add(took)
			}
			if from, ok := giving[rep[:i]]; ok {
				out = append(out, swapSpan{model: rep[:i], from: from, ready: end})
				delete(giving, rep[:i])
			}
		}
	}
	return out
}

// settledSwaps are the swaps once the fleet has logged every replica it
// placed as ready (or 5 s have passed): it does so once the requests that
// waited for one have reached it (settleAfterReady), after their answers,
// maybe, and the swap a request waited for would be missing.
func (s *apiServer) settledSwaps(t testing.TB, data string) []swapSpan {
	for give := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		logs := s.logs.String()
		if strings.Count(logs, `msg="placing a replica"`) <= strings.Count(logs, `msg="replica ready"`) || time.Now().After(give) {
			return s.swaps(readyTimes(t, data))
		}
	}
}

// readyTimes are when each replica started in the data folder became
// ready, by the fleet's history of starts.
func readyTimes(t testing.TB, data string) map[string]time.Time {
	db := testkit.OpenDBFile(t, filepath.Join(data, "modelserve.db"))
	defer db.Close()
	starts, err := fleet.NewHistory(db).Recent(context.Background(), 1<<20) // every start a run makes, many times over
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	for _, st := range starts {
		out[st.Replica] = st.ReadyAt
	}
	return out
}

// waitedFor is the swap a request waited for: the last to make its
// model ready between its arrival and its sending to a replica; false
// when none did.
func waitedFor(swaps []swapSpan, r sent) (swapSpan, bool) {
	var out swapSpan
	found := false
	for _, w := range swaps {
		if w.model == r.model && w.ready.After(r.arrived) && !w.ready.After(r.sentOn()) {
			out, found = w, true
		}
	}
	return out, found
}

// logField is the value of key=value in a log line's text, unquoted
// values only; "" when it has none.
func logField(line, key string) string {
	_, v, ok := strings.Cut(line, " "+key+"=")
	if !ok {
		return ""
	}
	v, _, _ = strings.Cut(v, " ")
	return v
}

// fleetLines are the fleet's log lines from one moment to another, each
// with its time from the first: what it placed, gave back and retired.
func (s *apiServer) fleetLines(from, to time.Time) []string {
	var out []string
	for _, l := range s.timedLines() {
		if !strings.Contains(l.rest, "part=fleet") || l.at.Before(from.Add(-time.Millisecond)) || l.at.After(to) {
			continue
		}
		out = append(out, fmt.Sprintf("+%s %s", l.at.Sub(from).Round(time.Millisecond), l.rest))
	}
	return out
}

// timedLine is one line of the server's log: its time, to the nanosecond
// (startAPI), and the rest of it.
type timedLine struct {
	at   time.Time
	rest string
}

// timedLines are the server's log lines so far, each with its time.
func (s *apiServer) timedLines() []timedLine {
	var out []timedLine
	for _, l := range strings.Split(s.logs.String(), "\n") {
		at, rest, ok := strings.Cut(strings.TrimPrefix(l, "time="), " ")
		if !ok {
			continue
		}
		if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
			out = append(out, timedLine{at: t, rest: rest})
		}
	}
	return out
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// evictions are the replicas given back so far, by /metrics
// (modelserve_fleet_evictions_total, every model and reason): the swaps.
func (s *apiServer) evictions() int {
	s.t.Helper()
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "modelserve_fleet_evictions_total{"); ok {
			v, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
			if err != nil {
				s.t.Fatalf("/metrics: %q: %v", l, err)
			}
			n += int(v)
		}
	}
	return n
}

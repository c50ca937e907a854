package main

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

// BenchmarkThreeModelsInMemoryForOne: three tiny models on demand in
// memory for one, 300 requests in random order from 8 clients, through
// the real binary and the real engine. Every request is to be answered (one
// that is not fails the benchmark), and none is to wait longer than the
// answers queued ahead of it plus one swap: request i, sent at a, ends no
// later than the last of the requests unanswered at a does, plus one swap,
// plus its own answer (the engine's timings for it, its prompt and its
// generation: not a wait). One swap is the one it waited for, as long as
// the fleet's log says it took (from giving back room for its model to the
// model's replica being ready), and at least the longest of a few swaps
// measured alone beforehand: under load a swap took up to a third longer
// than alone (the old engine's stop and the new one's load, the engine's
// own time), and the bound is to catch a request that waited for more
// than one, not a slower one. Those unanswered at a include the requests
// sent within a millisecond after it (sameMoment): eight clients send at once
// after each answer, and which of two requests sent in the same moment
// reached modelserve first is not the order of the clocks read before
// sending them. It reports the errors, the longest wait, and the most any
// request went past its bound (≤ 0: every one within).
func BenchmarkThreeModelsInMemoryForOne(b *testing.B) {
	const sameMoment = time.Millisecond
	s, c, _ := startSwapWorld(b, "alpha", "beta", "gamma")
	models := []string{"alpha", "beta", "gamma"}

	// One swap, alone: each request asks for the model not loaded.
	var swap time.Duration
	for i, model := range []string{"alpha", "beta", "gamma", "alpha", "beta"} {
		began := time.Now()
		own, err := askTimed(c, model, fmt.Sprintf("swap %d alone", i))
		if err != nil {
			b.Fatalf("the swap to %s alone: %v", model, err)
		}
		if own == 0 {
			b.Fatalf("the engine's answer for %s gave no timings", model)
		}
		if i > 0 { // the first is a cold start, not a swap
			swap = max(swap, time.Since(began)-own)
		}
	}
	const (
		clients  = 8
		requests = 300
		bound    = 90 * time.Second // the whole run's, well above what it takes
	)
	// A connection for each client, made before the run: a request sent
	// first at the start of the run, by a client that dialled meanwhile,
	// reached modelserve after others sent milliseconds later, and its
	// bound counted the dial as modelserve's wait.
	var warm sync.WaitGroup
	for range clients {
		warm.Go(func() {
			if err := askModel(c, "beta", "warm"); err != nil {
				b.Errorf("warming the clients' connections: %v", err)
			}
		})
	}
	warm.Wait()
	type sent struct {
		at, end time.Time
		own     time.Duration // the engine's time over its answer
		err     error
		model   string
	}
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
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					if time.Now().After(deadline) {
						return
					}
					model := models[rand.N(len(models))]
					r := sent{at: time.Now(), model: model}
					r.own, r.err = askTimed(c, model, fmt.Sprintf("request %d", i))
					r.end = time.Now()
					mu.Lock()
					all = append(all, r)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		b.StopTimer()

		slices.SortFunc(all, func(x, y sent) int { return x.at.Compare(y.at) })
		swaps := s.swaps()
		var slowest time.Duration
		for _, w := range swaps {
			slowest = max(slowest, w.ready.Sub(w.from))
		}
		var failed []string
		var longest, over time.Duration
		var worst sent
		var went []sent // the later requests answered before the worst
		overtaken, within, between := 0, 0, 0
		over = -time.Hour
		for i, r := range all {
			if r.err != nil {
				var apiErr *openai.Error
				if errors.As(r.err, &apiErr) {
					r.err = fmt.Errorf("%d %s", apiErr.StatusCode, apiErr.RawJSON())
				}
				failed = append(failed, r.model+": "+r.err.Error())
				continue
			}
			ahead := r.at
			for j, q := range all {
				if j != i && q.at.Before(r.at.Add(sameMoment)) && q.end.After(r.at) {
					ahead = later(ahead, q.end)
				}
			}
			longest = max(longest, r.end.Sub(r.at))
			if d := r.end.Sub(ahead.Add(max(swap, waitedFor(swaps, r.model, r.at, r.end)) + r.own)); d > over {
				// Who went before it, of those sent after it: requests
				// for its own model say its queue was not kept in order.
				// Those sent within a moment of it may have reached
				// modelserve first. Requests for other models sent after it
				// and answered after those ahead of it were served in its
				// time: a replica it waited for took them on.
				over, worst, overtaken, within, between = d, r, 0, 0, 0
				went = went[:0]
				for _, q := range all[i+1:] {
					switch {
					case q.model == r.model && q.end.Before(r.end):
						overtaken++
						if q.at.Sub(r.at) < sameMoment {
							within++
						}
						went = append(went, q)
					case q.model != r.model && q.end.After(ahead) && q.end.Before(r.end):
						between++
						went = append(went, q)
					}
				}
			}
		}
		starts := s.evictions() - swapsBefore
		b.Logf("%d requests from %d clients, %d errors, %d swaps; longest wait %s; one swap alone %s; "+
			"most past its bound (the answers ahead of it, one swap and its own answer) %s, by a request for %s that waited %s (its own answer %s, the swap it waited for %s), "+
			"which %d later requests for %s went before (%d of them sent within 1ms of it), and %d later requests for "+
			"other models were answered after those ahead of it and before it", len(all), clients, len(failed), starts,
			longest.Round(time.Millisecond), swap.Round(time.Millisecond), over.Round(time.Millisecond),
			worst.model, worst.end.Sub(worst.at).Round(time.Millisecond), worst.own.Round(time.Millisecond), waitedFor(swaps, worst.model, worst.at, worst.end).Round(time.Millisecond), overtaken, worst.model, within, between)
		if over > 0 {
			// What went before it, and what the fleet did meanwhile, for
			// whoever looks into why (go test -v: without it a
			// benchmark's log is cut after ten lines).
			for _, q := range went {
				b.Logf("  went before it: %s sent %s after it, answered %s before it", q.model,
					q.at.Sub(worst.at).Round(time.Millisecond), worst.end.Sub(q.end).Round(time.Millisecond))
			}
			for _, l := range s.fleetLines(worst.at, worst.end) {
				b.Logf("  meanwhile: %s", l)
			}
		}
		b.ReportMetric(float64(len(failed)), "errors")
		b.ReportMetric(float64(longest.Milliseconds()), "longest-wait-ms")
		b.ReportMetric(float64(swap.Milliseconds()), "one-swap-ms")
		b.ReportMetric(float64(slowest.Milliseconds()), "slowest-swap-in-run-ms")
		b.ReportMetric(float64(over.Milliseconds()), "past-bound-ms")
		b.ReportMetric(float64(starts), "swaps")
		if len(all) < requests {
			b.Errorf("only %d of %d requests were sent within %s", len(all), requests, bound)
		}
		if len(failed) > 0 {
			b.Errorf("%d of %d requests failed; the first: %s", len(failed), len(all), failed[0])
		}
		b.StartTimer()
	}
}

// swapSpan is a swap the fleet made: from giving back room for model to
// the model's new replica being ready.
type swapSpan struct {
	model       string
	from, ready time.Time
}

// swaps are the swaps the fleet's log tells of, in the order they ended.
// A replica is ready as long after its placing as its "replica ready"
// line's took says: the line itself is written a moment later, once the
// requests that waited for it have reached it.
func (s *apiServer) swaps() []swapSpan {
	var out []swapSpan
	giving := map[string]time.Time{} // model: when room began to be given back for it
	placed := map[string]time.Time{} // replica: when it was placed
	for _, l := range strings.Split(s.logs.String(), "\n") {
		at, rest, ok := strings.Cut(strings.TrimPrefix(l, "time="), " ")
		if !ok || !strings.Contains(rest, "part=fleet") {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
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
			if from, ok := giving[rep[:i]]; ok {
				out = append(out, swapSpan{model: rep[:i], from: from, ready: at.Add(took)})
				delete(giving, rep[:i])
			}
		}
	}
	return out
}

// waitedFor is how long the swap that a request for model, sent at at
// and answered at end, waited for took: the last to make model ready
// between the two, 0 when none did.
func waitedFor(swaps []swapSpan, model string, at, end time.Time) time.Duration {
	var d time.Duration
	for _, w := range swaps {
		if w.model == model && w.ready.After(at) && w.ready.Before(end) {
			d = w.ready.Sub(w.from)
		}
	}
	return d
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
	for _, l := range strings.Split(s.logs.String(), "\n") {
		at, rest, ok := strings.Cut(strings.TrimPrefix(l, "time="), " ")
		if !ok || !strings.Contains(rest, "part=fleet") {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil || t.Before(from.Add(-time.Millisecond)) || t.After(to) {
			continue
		}
		out = append(out, fmt.Sprintf("+%s %s", t.Sub(from).Round(time.Millisecond), rest))
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

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/llamatest"
)

// The load a handover is measured under, as the goal states it:
// sixteen clients, half of them streaming, asking three served models.
const (
	loadClients = 16
	// addedLatencyGoal is the most a handover is to add to the longest
	// request, over the longest of as long a while without one.
	addedLatencyGoal = 100 * time.Millisecond
)

// threeModels are the models a handover is measured serving, by catalog
// name, each from a tiny repository of its own.
var threeModels = []string{"alpha", "beta", "gamma"}

// serveThree serves threeModels with one replica each, their jobs side
// by side, and waits for every one to be done.
func (h *handoverServer) serveThree(t testing.TB, hub *hubtest.Server) {
	t.Helper()
	ids := make([]string, len(threeModels))
	for i, name := range threeModels {
		repo := "acme/" + name + "-GGUF"
		tinyRepo(t, hub, repo, name+"-Q4_K_M.gguf", ggufgen.Spec{})
		ids[i] = h.serve(t, repo, name, 1)
	}
	for _, id := range ids {
		h.served(t, id)
	}
}

// sample is one request's outcome in time.
type sample struct {
	began  time.Time
	took   time.Duration
	model  string
	stream bool
}

func (s sample) ended() time.Time { return s.began.Add(s.took) }

// clients ask the models in a loop, half of them streaming, each
// request's outcome counted and its time kept.
type clients struct {
	mu                  sync.Mutex
	ok, failed, refused int
	cut                 int // streams that ended without [DONE]
	firstErrs           []string
	answered            []sample
	stop                chan struct{}
	wg                  sync.WaitGroup
}

// startClients starts n clients asking models in turn, the even ones
// streaming, each with connections of its own kept alive as an OpenAI
// client keeps them.
func startClients(base, token string, models []string, n int) *clients {
	l := &clients{stop: make(chan struct{})}
	for i := range n {
		stream, model := i%2 == 0, models[i%len(models)]
		client := &http.Client{Transport: &http.Transport{}}
		l.wg.Go(func() {
			defer client.CloseIdleConnections()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				l.one(client, base, token, model, stream)
			}
		})
	}
	return l
}

func (l *clients) one(client *http.Client, base, token, model string, stream bool) {
	body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 8, "stream": stream,
		"messages": []map[string]string{{"role": "user", "content": "Say hello"}}})
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	began := time.Now()
	resp, err := client.Do(req)
	var b []byte
	if err == nil {
		b, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	took := time.Since(began)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil && errors.Is(err, syscall.ECONNREFUSED):
		l.refused++
		l.note(err.Error())
	case err != nil:
		l.failed++
		l.note(err.Error())
	case resp.StatusCode != http.StatusOK:
		l.failed++
		l.note(fmt.Sprintf("%s: %s", resp.Status, b))
	case stream && !bytes.Contains(b, []byte("data: [DONE]")):
		l.cut++
		l.note("a stream ended without [DONE]: " + string(b))
	default:
		l.ok++
		l.answered = append(l.answered, sample{began: began, took: took, model: model, stream: stream})
	}
}

func (l *clients) note(s string) {
	if len(l.firstErrs) < 5 {
		l.firstErrs = append(l.firstErrs, s)
	}
}

func (l *clients) end() {
	close(l.stop)
	l.wg.Wait()
}

// faults is every request that was not answered whole, with the first
// errors; "" when there was none.
func (l *clients) faults() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed+l.refused+l.cut == 0 {
		return ""
	}
	return fmt.Sprintf("%d answered, %d failed, %d refused a connection, %d streams cut; first: %q", l.ok, l.failed, l.refused, l.cut, l.firstErrs)
}

// span is the answered requests that ended within (from, to]: their
// count, their median, the time 99 in 100 took at most, and the longest
// of them.
type span struct {
	n           int
	median, p99 time.Duration
	longest     sample
}

func (l *clients) span(from, to time.Time) span {
	l.mu.Lock()
	defer l.mu.Unlock()
	var in []sample
	for _, s := range l.answered {
		if e := s.ended(); e.After(from) && !e.After(to) {
			in = append(in, s)
		}
	}
	if len(in) == 0 {
		return span{}
	}
	slices.SortFunc(in, func(a, b sample) int { return int(a.took - b.took) })
	return span{n: len(in), median: in[len(in)/2].took, p99: in[len(in)*99/100].took, longest: in[len(in)-1]}
}

// handoverRun is one handover under load, measured: the span from the
// SIGHUP until the new process had answered alone for a second, and the
// baseline, the same clients for as long again right after it, with no
// handover.
type handoverRun struct {
	through, baseline span
	sighup            time.Time
}

// added is what the handover added to the longest request: its time over
// the longest of the baseline's, as long a while of the same clients.
func (r handoverRun) added() time.Duration { return r.through.longest.took - r.baseline.longest.took }

func (r handoverRun) String() string {
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("without a handover: %d requests, median %s, p99 %s, longest %s; through the SIGHUP: %d requests, median %s, p99 %s, longest %s (%s, streaming %t, began %s after the SIGHUP): %s added (goal: under %s)",
		r.baseline.n, ms(r.baseline.median), ms(r.baseline.p99), ms(r.baseline.longest.took),
		r.through.n, ms(r.through.median), ms(r.through.p99), ms(r.through.longest.took), r.through.longest.model, r.through.longest.stream,
		ms(r.through.longest.began.Sub(r.sighup)), ms(r.added()), addedLatencyGoal)
}

// throughSIGHUP is one handover under load: modelserve gets SIGHUP while
// the clients ask, and they ask on until the new process has answered
// alone for a second, then for as long again as the baseline. It checks
// what a client would notice (every request answered, every stream
// whole, the same engines after as before).
func (h *handoverServer) throughSIGHUP(t testing.TB, ld *clients) handoverRun {
	t.Helper()
	engines := h.enginePIDs()
	if len(engines) < len(threeModels) {
		t.Fatalf("%d engines run before the SIGHUP, want one for each of %v", len(engines), threeModels)
	}
	old := h.servingPID()
	sighup := time.Now()
	syscall.Kill(old, syscall.SIGHUP)
	h.awaitTakeover(t, old)
	time.Sleep(time.Second) // the new process answering alone
	over := time.Now()
	time.Sleep(over.Sub(sighup))
	run := handoverRun{through: ld.span(sighup, over), baseline: ld.span(over, time.Now()), sighup: sighup}

	if f := ld.faults(); f != "" {
		t.Errorf("through the SIGHUP: %s\n%s", f, h.first.logs.String())
	}
	if run.through.n == 0 || run.baseline.n == 0 {
		t.Errorf("%d requests answered through the SIGHUP and %d after it: the clients asked nothing", run.through.n, run.baseline.n)
	}
	// The new process adopted the engines: none was loaded again.
	if after := h.enginePIDs(); !maps.Equal(after, engines) {
		t.Errorf("the engines before the SIGHUP were %v, after it %v: the new process loaded its own", engines, after)
	}
	return run
}

// BenchmarkSIGHUPUnderLoad: the goal as a benchmark. Three models
// served by the real engine, sixteen clients (half streaming) asking them
// through handoversPerRun SIGHUPs, each followed by as long a while with
// none, the baseline: it reports each handover's longest request beside
// the baseline's, and the median of what the handovers added, and fails
// when a request failed, a stream was cut, or an engine was loaded again.
// One handover's figure is one longest request, which the machine's other
// work alone moves by tens of milliseconds: the median of several is the
// figure to read.
func BenchmarkSIGHUPUnderLoad(b *testing.B) {
	const handoversPerRun = 3
	engine := llamatest.Path(b)
	hub := hubtest.New(b)
	h := startHandoverServer(b, hub, engine)
	h.serveThree(b, hub)
	ld := startClients(h.api.base, h.api.token, threeModels, loadClients)
	defer ld.end()
	time.Sleep(time.Second) // the clients' connections made
	b.ResetTimer()
	var added, through, baseline []time.Duration
	for range b.N {
		for range handoversPerRun {
			run := h.throughSIGHUP(b, ld)
			b.Log(run)
			added = append(added, run.added())
			through = append(through, run.through.longest.took)
			baseline = append(baseline, run.baseline.longest.took)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(median(baseline).Milliseconds()), "baseline-longest-ms")
	b.ReportMetric(float64(median(through).Milliseconds()), "handover-longest-ms")
	b.ReportMetric(float64(median(added).Milliseconds()), "added-ms")
}

// median is the middle of ds, 0 of none.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

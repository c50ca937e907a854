package jobs

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// BenchmarkServePresent is a job for a model the mirror already holds, from
// Start until it is in the catalog: what serving a model again costs when
// nothing needs fetching (target: under 200 ms).
func BenchmarkServePresent(b *testing.B) {
	e := newEnv(b, withNodeMemory(64<<30))
	e.addModel(tinyRepo, hubtest.RepoOptions{}, map[string]ggufgen.Spec{tinyFile: {}})
	if j := MustEnd(b, e.srv, MustStart(b, e.srv, Request{Repo: tinyRepo, Replicas: 1}).ID); j.State != Done {
		b.Fatalf("the first job ended %s: %s", j.State, j.Error)
	}
	b.ResetTimer()
	for b.Loop() {
		if j := MustEnd(b, e.srv, MustStart(b, e.srv, Request{Repo: tinyRepo, Replicas: 1}).ID); j.State != Done {
			b.Fatalf("job ended %s: %s", j.State, j.Error)
		}
	}
	b.StopTimer()
	if n := e.hub.Requests(tinyRepo, tinyFile); n != 1 {
		b.Errorf("the file was fetched %d times; the mirror had it", n)
	}
}

// BenchmarkEvents200Subscribers is one step change, saved and delivered to
// 200 watchers of the job; it reports the 99th percentile of the time from
// the change to each watcher having it (target: under 50 ms).
func BenchmarkEvents200Subscribers(b *testing.B) {
	const watchers = 200
	e := newEnv(b)
	now := time.Now().UTC()
	l := &live{job: Job{ID: newID(now), Kind: KindServe, Request: Request{Repo: tinyRepo}, State: Running,
		Steps: []Step{}, Started: now}, seq: 1, cancel: func(error) {}}
	if err := save(context.Background(), e.db, l.job, l.seq, -1); err != nil {
		b.Fatal(err)
	}
	e.srv.mu.Lock()
	e.srv.live[l.job.ID] = l
	e.srv.mu.Unlock()

	// sent[seq] is when change seq was made.
	var mu sync.Mutex
	sent := map[int64]time.Time{}
	latencies := make(chan time.Duration, watchers*64)
	for range watchers {
		ch, stop := e.srv.Subscribe(l.job.ID)
		b.Cleanup(stop)
		<-ch // the snapshot
		go func() {
			for ev := range ch {
				mu.Lock()
				at := sent[ev.Seq]
				mu.Unlock()
				latencies <- time.Since(at)
			}
		}()
	}
	var all []time.Duration
	i := 0
	b.ResetTimer()
	for b.Loop() {
		i++
		_, seq := l.snapshot()
		mu.Lock()
		sent[seq+1] = time.Now()
		mu.Unlock()
		e.srv.step(l, StepMirror, Running, fmt.Sprintf("fetching: change %d", i))
		for range watchers {
			all = append(all, <-latencies)
		}
	}
	b.StopTimer()
	slices.Sort(all)
	p99 := all[len(all)*99/100]
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
	if p99 > 50*time.Millisecond {
		b.Errorf("the 99th percentile delivery took %s; the target is 50ms", p99)
	}
}

package main

import (
	"errors"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"modelserve/internal/fleet"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/jobs"
)

// BenchmarkSteadyClientUnderSwapAbuse: memory for a kept model (alpha,
// Scaling.Min 1) and one model on demand beside it, with the fleet's
// default residency, through the real binary and the real engine. A
// steady client asks alpha, one request after another, alone and then
// while an abuser with the same token asks beta and gamma in turn, each
// taking the other's room. Without a residency the abuse swapped at every
// request (361 swaps a minute) and the steady client's median went from
// 4 ms to 250 ms; with it the swaps are bounded by one a residency, and
// the steady client's median is to stay within twice its own alone.
//
// It reports the steady client's median alone and under the abuse, their
// ratio (goal ≤ 2), the swaps in the abuse and their bound, and the
// abuser's requests answered and turned away; it fails past either goal.
func BenchmarkSteadyClientUnderSwapAbuse(b *testing.B) {
	const (
		budget = 470e6 // two tiny models at a 2048-token pool (about 170 MB each), never three
		alone  = 5 * time.Second
		abused = 20 * time.Second
	)
	hub := hubtest.New(b)
	s, _, _ := startSwapWorldSized(b, hub, budget, []string{"beta", "gamma"}, []int{2048, 2048},
		func(cfg *config) { cfg.Residency = fleet.DefaultResidency })
	tinyRepo(b, hub, "acme/alpha-GGUF", "alpha-Q4_K_M.gguf", ggufgen.Spec{ContextLength: 4096})
	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/alpha-GGUF", "name": "alpha", "replicas": 1,
		"context_length": 2048, "ctx_pool": 2048}, &job); code != http.StatusAccepted {
		b.Fatalf("serve alpha: %d %+v", code, job)
	}
	if seen := s.watch(job.ID, 2*time.Minute); seen[len(seen)-1].State != jobs.Done {
		b.Fatalf("serving alpha ended %s: %s", seen[len(seen)-1].State, seen[len(seen)-1].Error)
	}
	steady, abuser := ownClient(s), ownClient(s)
	if err := askModel(steady, "alpha", "warm"); err != nil {
		b.Fatalf("alpha: %v", err)
	}
	// steadily asks alpha for d, and is the median of its answers.
	steadily := func(d time.Duration) time.Duration {
		var took []time.Duration
		for end := time.Now().Add(d); time.Now().Before(end); {
			start := time.Now()
			if err := askModel(steady, "alpha", "steady"); err != nil {
				b.Fatalf("the steady client's request: %v", err)
			}
			took = append(took, time.Since(start))
		}
		slices.Sort(took)
		return took[len(took)/2]
	}

	b.ResetTimer()
	for range b.N {
		base := steadily(alone)

		before := s.evictions()
		var answered, turned atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				err := askModel(abuser, []string{"beta", "gamma"}[i%2], "abuse")
				var ae *openai.Error
				switch {
				case err == nil:
					answered.Add(1)
				case errors.As(err, &ae) && ae.StatusCode == http.StatusTooManyRequests:
					turned.Add(1)
				default:
					b.Errorf("the abuser's request: %v", err)
					return
				}
			}
		})
		started := time.Now()
		under := steadily(abused)
		swaps := s.evictions() - before
		took := time.Since(started)
		close(stop)
		wg.Wait()

		ratio := float64(under) / float64(base)
		bound := int(took/fleet.DefaultResidency) + 2
		b.ReportMetric(float64(base.Microseconds())/1000, "steady-p50-ms")
		b.ReportMetric(float64(under.Microseconds())/1000, "abused-p50-ms")
		b.ReportMetric(ratio, "p50-ratio")
		b.ReportMetric(float64(swaps), "swaps")
		b.ReportMetric(float64(answered.Load()), "abuser-answered")
		b.ReportMetric(float64(turned.Load()), "abuser-429")
		b.Logf("the steady client's median: %s alone, %s under the abuse (%.2f×, goal ≤ 2); %d swaps in %s (bound %d, one a %s residency); the abuser had %d answered, %d turned away",
			base.Round(10*time.Microsecond), under.Round(10*time.Microsecond), ratio, swaps, took.Round(time.Second), bound,
			fleet.DefaultResidency, answered.Load(), turned.Load())
		if ratio > 2 {
			b.Errorf("the steady client's median under the abuse is %.2f× its own alone; want within 2×", ratio)
		}
		if swaps > bound {
			b.Errorf("%d swaps in %s; want at most %d, one a residency", swaps, took.Round(time.Second), bound)
		}
	}
}

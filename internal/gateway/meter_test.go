package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/openai/openai-go/v3/option"

	"modelserve/internal/testkit"
)

// waitRequests waits until m has counted n requests: the gateway counts
// a request a moment after its client has the whole answer.
func waitRequests(t testing.TB, m *Meter, n int) {
	t.Helper()
	testkit.WaitFor(t, 2*time.Second, fmt.Sprintf("%d requests counted", n), func() (bool, string) {
		got := m.Read()
		return got.Requests >= n, fmt.Sprintf("%+v", got)
	})
}

// TestMeter: a meter counts what its entry serves from its start to its
// Stop, with plausible times to first token and generation rates for
// plain and streamed answers alike; meters are independent.
func TestMeter(t *testing.T) {
	e := mustEnv(t, Options{})
	e.mustAdd(longModel(t, "long"))
	e.waitServing("long", 1)
	c := e.client(e.token)
	ctx := context.Background()
	gen := option.WithJSONSet("ignore_eos", true)

	// ask sends n requests of 64 tokens, and returns the longest any took
	// as the client saw it, and the engine's own generation rate.
	ask := func(n int, stream bool) (longest time.Duration, engineRate float64) {
		t.Helper()
		var tokens int
		var ms float64
		for range n {
			start := time.Now()
			var raw string
			if stream {
				s := c.Chat.Completions.NewStreaming(ctx, hello("long", 64), gen)
				for s.Next() {
					if ch := s.Current(); strings.Contains(ch.RawJSON(), `"timings"`) {
						raw = ch.RawJSON()
					}
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
			} else {
				res, err := c.Chat.Completions.New(ctx, hello("long", 64), gen)
				if err != nil {
					t.Fatal(err)
				}
				raw = res.RawJSON()
			}
			longest = max(longest, time.Since(start))
			var v struct {
				Timings struct {
					PredictedN  int     `json:"predicted_n"`
					PredictedMS float64 `json:"predicted_ms"`
				} `json:"timings"`
			}
			if json.Unmarshal([]byte(raw), &v) != nil || v.Timings.PredictedN != 64 {
				t.Fatalf("no timings in the answer: %s", raw)
			}
			tokens += v.Timings.PredictedN
			ms += v.Timings.PredictedMS
		}
		return longest, float64(tokens) / (ms / 1000)
	}

	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			m := e.gw.Measure("long")
			defer m.Stop()
			longest, engine := ask(8, stream)
			waitRequests(t, m, 8)
			got := m.Read()
			if got.Requests != 8 || got.Answered != 8 || got.Failed != 0 || time.Since(got.Since) < longest {
				t.Fatalf("%+v; want 8 requests answered since the start", got)
			}
			// The histogram's slots are 19% apart.
			if got.TTFTP50 <= 0 || got.TTFTP50 > got.TTFTP95 || got.TTFTP95 > longest*6/5 {
				t.Errorf("time to first token p50 %s, p95 %s; want above 0 and within the longest request, %s", got.TTFTP50, got.TTFTP95, longest)
			}
			// A plain answer's rate is the engine's own; a stream's, seen
			// from the gateway, is of the same order.
			low, high := engine*0.99, engine*1.01
			if stream {
				low, high = engine/10, engine*2
			}
			if got.TokensPerSecond < low || got.TokensPerSecond > high {
				t.Errorf("%.0f tokens/s; the engine says %.0f", got.TokensPerSecond, engine)
			}
			t.Logf("%+v (the engine: %.0f tokens/s; longest request %s)", got, engine, longest)
		})
	}

	t.Run("Stop, and independent meters", func(t *testing.T) {
		a := e.gw.Measure("long")
		ask(2, false)
		waitRequests(t, a, 2)
		b, other := e.gw.Measure("long"), e.gw.Measure("tiny")
		defer b.Stop()
		defer other.Stop()
		ask(2, true)
		waitRequests(t, b, 2)
		a.Stop()
		a.Stop() // again: nothing
		ask(3, false)
		waitRequests(t, b, 5)
		if got := a.Read(); got.Requests != 4 {
			t.Errorf("a, stopped after 4 requests: %+v", got)
		}
		if got := b.Read(); got.Requests != 5 || got.Answered != 5 || b.Read().Since.Before(a.Read().Since) {
			t.Errorf("b, started after 2 requests: %+v", got)
		}
		if got := other.Read(); got.Requests != 0 || got.TTFTP50 != 0 || got.TokensPerSecond != 0 {
			t.Errorf("a meter on another model: %+v", got)
		}
	})

	t.Run("concurrent requests and meters", func(t *testing.T) {
		m := e.gw.Measure("long")
		defer m.Stop()
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 3 {
					x := e.gw.Measure("long")
					if _, err := c.Chat.Completions.New(ctx, hello("long", 4)); err != nil {
						t.Error(err)
					}
					x.Read()
					x.Stop()
				}
			})
		}
		wg.Wait()
		waitRequests(t, m, 12)
		if got := m.Read(); got.Requests != 12 || got.Answered != 12 {
			t.Errorf("%+v; want the 12 requests", got)
		}
	})
}

// TestHistogramIsFixedSize: a meter may run for days; its histogram of
// times to first token stays the same size however much it counts, and
// its quantiles stay within a few percent.
func TestHistogramIsFixedSize(t *testing.T) {
	var h histogram
	size := unsafe.Sizeof(h)
	if allocs := testing.AllocsPerRun(1000, func() { h.add(37 * time.Millisecond) }); allocs != 0 {
		t.Errorf("adding allocates %v times", allocs)
	}
	h = histogram{}
	// A million durations, 1 ms to 1000 ms evenly: p50 500 ms, p95 950 ms.
	for i := range 1_000_000 {
		h.add(time.Millisecond + time.Duration(i)*time.Microsecond*999/1000)
	}
	if unsafe.Sizeof(h) != size || size > 1024 {
		t.Errorf("the histogram is %d bytes", size)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{.5, 500 * time.Millisecond}, {.95, 950 * time.Millisecond}} {
		got := h.quantile(c.q)
		if math.Abs(float64(got-c.want)) > 0.05*float64(c.want) {
			t.Errorf("p%.0f is %s, want about %s", c.q*100, got, c.want)
		}
	}
	if got := (&histogram{}).quantile(.5); got != 0 {
		t.Errorf("the median of nothing is %s", got)
	}
}

package gateway

import (
	"context"
	"flag"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	oteltrace "go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"

	"modelserve/internal/trace"
)

// switchedTracer is a gateway's tracer switched on and off while it
// serves: the real one while on is set, else the one that records
// nothing, as a gateway with tracing off uses. Off, a request still
// reads its caller's traceparent and asks this for a span, which tracing
// off does not: a few hundred nanoseconds counted against off.
type switchedTracer struct {
	embedded.Tracer
	on   atomic.Bool
	real oteltrace.Tracer
}

func (s *switchedTracer) Start(ctx context.Context, name string, opts ...oteltrace.SpanStartOption) (context.Context, oteltrace.Span) {
	if s.on.Load() {
		return s.real.Start(ctx, name, opts...)
	}
	return trace.Or(nil).Start(ctx, name, opts...)
}

// slicedPairs is how many pairs of slices, one on and one off, sliced
// measures throughput in: the standard error of the ratio goes with one
// over its square root (about 0.01 at 60 on this 2-core machine, at each
// concurrency), so a run that is to say where the ratio is to a few
// thousandths asks for more (-args -sliced-pairs=150: 40 minutes for
// BenchmarkTracingOverhead).
var slicedPairs = flag.Int("sliced-pairs", 60, "pairs of slices, one on and one off, the benchmarks measure throughput ratios in")

// sliceLength is a slice's length for requests that took as: a dozen
// times their p50, so that few straddle two, within half a second (the
// exporter's batches) and a second.
func sliceLength(as []answer) time.Duration {
	return min(max(12*quantile(as, .5, took), 500*time.Millisecond), time.Second)
}

// slice is a stretch of a sliced load with one side on or off.
type slice struct {
	from, to time.Time
	on       bool
	answered int
}

// slicedRun is what sliced measured: each slice, in pairs of one on and
// one off.
type slicedRun struct{ slices []slice }

// sliced sends one unbroken load, conc clients to target, switched on
// and off by set (a gateway's tracer, or the target itself) in slices of
// about d, for slicedPairs pairs of slices, and counts the requests
// answered in each. A pair's order is drawn at random and each slice's
// length is jittered by a fifth, so that nothing periodic (the exporter's
// batch timer) keeps to one side. flush, at the end of each on slice and
// counted in it, exports what it traced: at least as often as the batches
// a gateway sends on its own (512 spans or a second), so tracing's export
// is counted in full; the slices are half a second at least, as slices of
// 100 ms would flush five times as often as a gateway does.
//
// Turns of each side's own, the connections dropped between them, began
// and ended with a ramp, and one turn's throughput moved from the next by
// a tenth at 8 clients; the turns' ratios of one run spread from 0.63 to
// 1.31. One load, switched, has no ramp and no new connections between
// the sides, and its requests share the engine's moment. The machine's
// own wander is left: with tracing off in both slices of each pair, a
// slice's throughput moved from its neighbour's by 5 to 10% at 8
// clients, and by a third over 20 s, so the standard error of the ratio
// is about 0.075/√pairs. A request is counted in the slice it was
// answered in: one that straddles two is counted whole in the second, so
// with slices d long and requests taking p, about p/d of them carry some
// of the other side's cost, which draws the two sides' figures together
// by as much.
func sliced(b *testing.B, set func(on bool), conc int, d time.Duration, target func(i int) (url, key string, body []byte), flush func()) slicedRun {
	b.Helper()
	var (
		stop   atomic.Bool
		wg     sync.WaitGroup
		mu     sync.Mutex
		ends   []time.Time
		next   atomic.Int64
		failed sync.Once
	)
	for range conc {
		wg.Go(func() {
			for !stop.Load() {
				url, key, body := target(int(next.Add(1)))
				_, err := call(url, key, body)
				at := time.Now()
				if err != nil {
					failed.Do(func() { b.Error(err) })
					return
				}
				mu.Lock()
				ends = append(ends, at)
				mu.Unlock()
			}
		})
	}
	// The load settles before the first slice.
	time.Sleep(d)
	var run slicedRun
	for range *slicedPairs {
		first := rand.N(2) == 0
		for _, on := range []bool{first, !first} {
			set(on)
			s := slice{from: time.Now(), on: on}
			time.Sleep(d + time.Duration(rand.Int64N(int64(d/5)*2)) - d/5)
			if on {
				flush()
			}
			s.to = time.Now()
			run.slices = append(run.slices, s)
		}
	}
	set(false)
	stop.Store(true)
	wg.Wait()
	for _, at := range ends {
		i, in := slices.BinarySearchFunc(run.slices, at, func(s slice, t time.Time) int {
			switch {
			case !s.to.After(t):
				return -1
			case s.from.After(t):
				return 1
			}
			return 0
		})
		if in {
			run.slices[i].answered++
		}
	}
	return run
}

// report reports the ratio (sliced_throughput_ratio), its standard error
// (sliced_ratio_se) and the low end of its 95% interval
// (sliced_ratio_low95).
func (r slicedRun) report(b *testing.B) {
	ratio, se := r.ratio()
	b.ReportMetric(ratio, "sliced_throughput_ratio")
	b.ReportMetric(se, "sliced_ratio_se")
	b.ReportMetric(ratio-2*se, "sliced_ratio_low95")
}

// rate is the requests answered a second in the slices on (or off).
func (r slicedRun) rate(on bool) float64 {
	n, t := 0, time.Duration(0)
	for _, s := range r.slices {
		if s.on == on {
			n, t = n+s.answered, t+s.to.Sub(s.from)
		}
	}
	return float64(n) / t.Seconds()
}

// ratio is on's throughput over off's, the whole run's, and its standard
// error, from the spread of the pairs' own ratios.
func (r slicedRun) ratio() (ratio, se float64) {
	var rs []float64
	for i := 0; i+1 < len(r.slices); i += 2 {
		on, off := r.slices[i], r.slices[i+1]
		if !on.on {
			on, off = off, on
		}
		if on.answered == 0 || off.answered == 0 {
			continue
		}
		rs = append(rs, float64(on.answered)/on.to.Sub(on.from).Seconds()/(float64(off.answered)/off.to.Sub(off.from).Seconds()))
	}
	mean := 0.0
	for _, x := range rs {
		mean += x / float64(len(rs))
	}
	v := 0.0
	for _, x := range rs {
		v += (x - mean) * (x - mean) / float64(max(len(rs)-1, 1))
	}
	return r.rate(true) / r.rate(false), math.Sqrt(v / float64(max(len(rs), 1)))
}

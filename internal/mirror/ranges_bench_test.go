package mirror

import (
	"context"
	"flag"
	"testing"
	"time"

	"modelserve/internal/hubtest"
)

var rangedBenchMiB = flag.Int("mirror.bench-mib", 256, "MiB of the file BenchmarkRangedFetch fetches")

// BenchmarkRangedFetch fetches one file from a Hub double with the CDN's
// manners, each way beside the others in the same run, and reports the
// ratios the issue asks for. Run it with -benchtime=1x: each way is one
// whole fetch of -mirror.bench-mib (256 MiB by default: 1 GiB at 20 MB/s
// takes 50 s over one connection).
func BenchmarkRangedFetch(b *testing.B) {
	if testing.Short() {
		b.Skip("fetches hundreds of MiB at a CDN's pace; not in -short")
	}
	size := int64(*rangedBenchMiB) << 20
	srv := newHub(b)
	commit := srv.AddFileSpec(repoID, hubtest.FileSpec{Path: "big.gguf", Size: size, Gen: hubtest.Pattern(7)})
	f := hubFile(srv, commit, "big.gguf", size, "")
	fetch := func(edit func(*Options)) float64 {
		m := newMirror(b, srv, func(o *Options) { o.StallTimeout = time.Minute; edit(o) })
		start := time.Now()
		if _, err := m.Fetch(context.Background(), []File{f}, nil); err != nil {
			b.Fatal(err)
		}
		return float64(size) / 1e6 / time.Since(start).Seconds()
	}
	one := func(o *Options) { o.Connections = 1 }
	fixed := func(n int) func(*Options) { return func(o *Options) { o.Connections, o.Fixed = n, true } }
	adaptive := func(o *Options) {}
	for range b.N {
		srv.ConnRate(20e6)
		single := fetch(one)
		par := fetch(adaptive)
		b.ReportMetric(single, "capped-1conn-MB/s")
		b.ReportMetric(par, "capped-adaptive-MB/s")
		b.ReportMetric(par/single, "capped-adaptive/1conn")

		srv.Throttle(6, 20)
		best := 0.0
		for _, n := range []int{4, 6} {
			best = max(best, fetch(fixed(n)))
		}
		before := srv.Throttled()
		thr := fetch(adaptive)
		b.ReportMetric(best, "throttled-best-fixed-MB/s")
		b.ReportMetric(thr, "throttled-adaptive-MB/s")
		b.ReportMetric(thr/best, "throttled-adaptive/best-fixed")
		b.ReportMetric((srv.Throttled() - before).Seconds(), "throttled-s-above-6")
		srv.Throttle(0, 1)
		srv.ConnRate(0)

		single = fetch(one)
		par = fetch(adaptive)
		b.ReportMetric(single, "loopback-1conn-MB/s")
		b.ReportMetric(par/single, "loopback-adaptive/1conn")

		capped := fetch(func(o *Options) { o.DownloadRate = 50e6 })
		b.ReportMetric(capped/50, "rate-50MB-measured/cap")
	}
}

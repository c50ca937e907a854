package mirror

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"modelserve/internal/hubtest"
	"modelserve/internal/operr"
)

const testPart = 64 << 10

// rangedMirror fetches over up to 4 connections in 64 KiB parts.
func rangedMirror(t testing.TB, srv *hubtest.Server, edit func(*Options)) *Mirror {
	t.Helper()
	return newMirror(t, srv, func(o *Options) {
		o.Connections, o.PartSize, o.RateWindow, o.Fixed = 4, testPart, 20*time.Millisecond, true
		if edit != nil {
			edit(o)
		}
	})
}

// partMeter counts what the mirror reports of its connections.
type partMeter struct {
	bytes, refetched, conns, most atomic.Int64
}

func (m *partMeter) MirrorFetched(n int64) { m.bytes.Add(n) }
func (m *partMeter) MirrorFailed()         {}
func (m *partMeter) MirrorPartRefetched()  { m.refetched.Add(1) }
func (m *partMeter) MirrorConnections(d int) {
	n := m.conns.Add(int64(d))
	for {
		most := m.most.Load()
		if n <= most || m.most.CompareAndSwap(most, n) {
			return
		}
	}
}

func TestRangedFetchUsesSeveralConnections(t *testing.T) {
	srv := newHub(t)
	content := randomish(1<<20, 11)
	f := addFile(t, srv, "big.gguf", content)
	srv.ConnRate(4 << 20) // slow enough that the connections overlap
	meter := &partMeter{}
	m := rangedMirror(t, srv, func(o *Options) { o.Metrics = meter })

	paths := mustFetch(t, m, f)

	mustHave(t, paths[0], content)
	// Past the file's size: what was in flight on a connection whose part
	// was split for an idle one.
	served(t, srv, f.Path, f.Size, f.Size+f.Size/2)
	if _, most := srv.Connections(); most < 2 {
		t.Errorf("the registry saw at most %d connections at once, want several", most)
	}
	if got := meter.bytes.Load(); meter.most.Load() != 4 || meter.conns.Load() != 0 || got < f.Size || got > f.Size+f.Size/2 {
		t.Errorf("metrics: at most %d connections, %d left open, %d bytes; want 4, 0, %d",
			meter.most.Load(), meter.conns.Load(), got, len(content))
	}
	if got := files(t, filepath.Dir(paths[0])); !slices.Equal(got, []string{".big.gguf.sha256", "big.gguf"}) {
		t.Errorf("the folder holds %q, want the file and its sha256 only", got)
	}
	if sum, err := readSidecar(paths[0]); err != nil || sum != f.SHA256 {
		t.Errorf("sidecar %q (%v), want %s", sum, err, f.SHA256)
	}
}

// The job page says how many connections a file comes over: the Fetch's
// progress carries the count while they run, and none once it is done.
func TestRangedFetchReportsItsConnections(t *testing.T) {
	srv := newHub(t)
	content := randomish(1<<20, 19)
	f := addFile(t, srv, "big.gguf", content)
	srv.ConnRate(1 << 20) // a quarter of a second over four: many reports
	m := rangedMirror(t, srv, nil)

	most, last := 0, -1
	if _, err := m.Fetch(context.Background(), []File{f}, func(p Progress) {
		most, last = max(most, p.Connections), p.Connections
	}); err != nil {
		t.Fatal(err)
	}
	if most != 4 || last != 0 {
		t.Errorf("the progress said at most %d connections, and %d at the end; want 4, then 0", most, last)
	}
	if got := Fetched(3e9, 6e9, 4); got != "3 of 6 GB (50%), over 4 connections" {
		t.Errorf("Fetched says %q", got)
	}
	if got := Fetched(3e9, 6e9, 1); got != "3 of 6 GB (50%)" {
		t.Errorf("one connection: Fetched says %q", got)
	}
}

func TestRangedFetchResumesACutPart(t *testing.T) {
	srv := newHub(t)
	content := randomish(1<<20, 12)
	f := addFile(t, srv, "big.gguf", content)
	srv.CutNext(repoID, f.Path, testPart/2, 2)
	m := rangedMirror(t, srv, nil)

	mustHave(t, mustFetch(t, m, f)[0], content)
	// The cut parts continue from where they stopped: the bytes before the
	// cuts (half a part each) are not fetched again. What is past the size
	// was in flight on connections whose parts were split for idle ones:
	// a fetch started over would cost twice the size.
	served(t, srv, f.Path, f.Size, f.Size+f.Size/2)
}

// A cut connection costs its own part a wait, not the whole file: while
// the cut part waits out the backoff, the others arrive.
func TestRangedFetchRetriesOnlyTheCutPart(t *testing.T) {
	srv := newHub(t)
	content := randomish(1<<20, 20)
	f := addFile(t, srv, "big.gguf", content)
	srv.ConnRate(4 << 20)
	srv.CutNext(repoID, f.Path, testPart/4, 1)
	const wait = 3 * time.Second
	m := rangedMirror(t, srv, func(o *Options) { o.Backoff = wait })

	start := time.Now()
	var allButOne atomic.Int64 // when all but the cut part had arrived, after start
	paths, err := m.Fetch(context.Background(), []File{f}, func(p Progress) {
		if p.BytesDone >= f.Size-testPart && allButOne.Load() == 0 {
			allButOne.Store(int64(time.Since(start)))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	mustHave(t, paths[0], content)
	if took := time.Duration(allButOne.Load()); took == 0 || took >= wait {
		t.Errorf("all parts but the cut one had arrived %s after the start; want before its %s wait was over", took, wait)
	}
	if took := time.Since(start); took < wait {
		t.Errorf("the fetch took %s: the cut part was asked for again before its %s wait", took, wait)
	}
	served(t, srv, f.Path, f.Size, f.Size+f.Size/2)
}

func TestRangedFetchResumesAfterRestart(t *testing.T) {
	srv := newHub(t)
	content := randomish(2<<20, 13)
	f := addFile(t, srv, "big.gguf", content)
	srv.ConnRate(1 << 20)
	dir := t.TempDir()
	first := rangedMirror(t, srv, func(o *Options) { o.Dir = dir })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := first.Fetch(ctx, []File{f}, func(p Progress) {
		if p.BytesDone >= p.BytesTotal*4/10 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled Fetch returned %v, want context.Canceled", err)
	}
	before := srv.BytesServed(repoID, f.Path)
	local := filepath.Join(dir, model, f.Revision, "big.gguf")
	have, ok := partialHave(local, f.Size)
	if !ok || have < f.Size/5 || have >= f.Size {
		t.Fatalf("the stopped fetch kept %d of %d bytes (%v), want about 40%%", have, f.Size, ok)
	}
	if entries, _ := first.List(context.Background()); len(entries) != 1 || entries[0].BytesDone != have {
		t.Errorf("List shows %+v, want one partial file with %d bytes", entries, have)
	}

	srv.ConnRate(0)
	second := rangedMirror(t, srv, func(o *Options) { o.Dir = dir })
	mustHave(t, mustFetch(t, second, f)[0], content)
	// What the first mirror had written is not asked for again.
	served(t, srv, f.Path, before+f.Size-have, before+f.Size-have+f.Size/4)
}

func TestRangedFetchStartsOverFromUnreadableParts(t *testing.T) {
	srv := newHub(t)
	content := randomish(1<<20, 14)
	f := addFile(t, srv, "big.gguf", content)
	m := rangedMirror(t, srv, nil)
	local, _ := m.LocalPath(f.Model, f.Revision, f.Path)
	os.MkdirAll(filepath.Dir(local), 0o755)
	// A partial file full of the wrong bytes, and parts that say half of
	// it is written but do not tile the file.
	os.WriteFile(partialPath(local), make([]byte, len(content)), 0o644)
	os.WriteFile(partsPath(local), []byte(`{"size":1048576,"parts":[[0,524288,524288]]}`), 0o644)

	mustHave(t, mustFetch(t, m, f)[0], content)
}

func TestRangedFetchFallsBackToOneStream(t *testing.T) {
	srv := newHub(t)
	content := randomish(1<<20, 15)
	f := addFile(t, srv, "big.gguf", content)
	srv.IgnoreRange(repoID, f.Path, true)
	m := rangedMirror(t, srv, nil)

	mustHave(t, mustFetch(t, m, f)[0], content)
	if n := srv.Requests(repoID, f.Path); n != 2 {
		t.Errorf("the registry answered %d requests, want 2: the part refused, then one stream", n)
	}
}

func TestRangedFetchRefetchesAStalledPart(t *testing.T) {
	srv := newHub(t)
	content := randomish(1<<20, 16)
	f := addFile(t, srv, "big.gguf", content)
	srv.StallNext(repoID, f.Path, 1000, 1)
	meter := &partMeter{}
	// The stall timeout is far off: only seeing the part fall behind the
	// others gets past it.
	m := rangedMirror(t, srv, func(o *Options) { o.StallTimeout, o.Metrics = time.Hour, meter })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	paths, err := m.Fetch(ctx, []File{f}, nil)
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	mustHave(t, paths[0], content)
	if meter.refetched.Load() == 0 {
		t.Error("no part was counted as fetched again")
	}
}

func TestRangedFetchRefusesAMismatchAndKeepsNothing(t *testing.T) {
	srv := newHub(t)
	content := randomish(1<<20, 17)
	f := addFile(t, srv, "big.gguf", content)
	srv.FlipByte(repoID, f.Path, 5*testPart+123)
	m := rangedMirror(t, srv, nil)

	_, err := m.Fetch(context.Background(), []File{f}, nil)
	if oe, ok := operr.As(err); !ok || oe.Kind != operr.Refused || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("Fetch returned %v, want the sha256 refused", err)
	}
	if got := files(t, m.dir); len(got) != 0 {
		t.Errorf("the mirror kept %q after a mismatch, want nothing", got)
	}
}

func TestDownloadRateHoldsTheFetch(t *testing.T) {
	srv := newHub(t)
	content := randomish(1<<20, 18)
	f := addFile(t, srv, "big.gguf", content)
	m := rangedMirror(t, srv, func(o *Options) { o.DownloadRate = 2 << 20 })

	start := time.Now()
	mustHave(t, mustFetch(t, m, f)[0], content)
	// 1 MiB at 2 MiB/s over four connections takes half a second, however
	// fast the loopback is (a tenth of a second may come in a burst).
	if took := time.Since(start); took < 350*time.Millisecond {
		t.Errorf("1 MiB capped at 2 MiB/s arrived in %s, want about 500ms", took)
	}
}

// TestControllerFindsTheThrottle plays the CDN of huggingface_hub #4893 to
// the controller: each connection 20 MB/s, every one slowed 20 times while
// more than 6 run.
func TestControllerFindsTheThrottle(t *testing.T) {
	cdn := func(n int) float64 {
		if n > 6 {
			return float64(n) * 1e6
		}
		return float64(n) * 20e6
	}
	c := newController(Options{}, 64)
	n, above := 1, 0
	for range 40 {
		n = c.next(n, cdn(n))
		if n > 6 {
			above++
		}
	}
	if n != 6 || above > 3 {
		t.Errorf("settled on %d connections after %d windows above the throttle; want 6, at most 3 above", n, above)
	}

	// A CDN that gives no more for a second connection keeps one.
	c = newController(Options{}, 64)
	n = 1
	for range 10 {
		n = c.next(n, 50e6)
	}
	if n != 1 {
		t.Errorf("a flat rate grew to %d connections, want 1", n)
	}

	// On a link one stream fills, two connections measure within a busy
	// machine's noise of one: a fifth more is noise, and the fetch goes
	// back to one and stays there. A CDN that paces each connection gives
	// a connection's share for each, and the count climbs.
	for _, tc := range []struct {
		name string
		rate func(n int) float64
		want func(n int) bool
	}{
		{"noise", func(n int) float64 { return 500e6 * min(float64(n), 1.2) }, func(n int) bool { return n == 1 }},
		{"paced", func(n int) float64 { return float64(n) * 19e6 }, func(n int) bool { return n > 2 }},
	} {
		c = newController(Options{}, 16)
		n = 1
		for range 10 {
			n = c.next(n, tc.rate(n))
		}
		if !tc.want(n) {
			t.Errorf("%s: settled on %d connections", tc.name, n)
		}
	}

	// A rate that falls while the count stays (the machine busy, the
	// network) is no throttle: the count is not cut to one.
	c = newController(Options{}, 4)
	n = 1
	for range 4 {
		n = c.next(n, float64(n)*20e6)
	}
	steady := n
	for range 5 {
		n = c.next(n, 10e6)
	}
	if n < steady {
		t.Errorf("a dip at a steady %d connections cut them to %d", steady, n)
	}
	// Each connection adds its share: the hard cap holds.
	c = newController(Options{}, 16)
	n = 1
	for range 20 {
		if n = c.next(n, float64(n)*20e6); n > 16 {
			t.Fatalf("went to %d connections, above the cap of 16", n)
		}
	}
	if n != 16 {
		t.Errorf("a rate that rises with every connection settled on %d, want the cap of 16", n)
	}
}

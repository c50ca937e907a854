package mirror

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"modelserve/internal/hubtest"
)

const benchSize = 1 << 30

// benchSum is the sha256 of the generated 1 GiB file, worked out once for
// both benchmarks rather than by hubtest for each.
var benchSum = sync.OnceValue(func() string {
	h := sha256.New()
	gen := hubtest.Pattern(42)
	buf := make([]byte, 1<<20)
	for off := int64(0); off < benchSize; off += int64(len(buf)) {
		gen(off, buf)
		h.Write(buf)
	}
	return hex.EncodeToString(h.Sum(nil))
})

// benchHub serves the generated 1 GiB file from a fresh Hub.
func benchHub(b *testing.B) (*hubtest.Server, File) {
	b.Helper()
	if testing.Short() {
		b.Skip("fetching 1 GiB over loopback takes seconds; not in -short")
	}
	srv := newHub(b)
	commit := srv.AddFileSpec(repoID, hubtest.FileSpec{Path: "big.gguf", Size: benchSize,
		Gen: hubtest.Pattern(42), SHA256: benchSum()})
	return srv, hubFile(srv, commit, "big.gguf", benchSize, benchSum())
}

// BenchmarkFetch1GiB is a whole fetch — redirect, download, sha256 as the
// bytes arrive, fsync, rename, sidecar — beside two baselines in the same
// run: a plain io.Copy of the same response to a file, with nothing checked
// or synced; and the same io.Copy through a sha256 followed by an fsync, the
// simplest way to do the work a mirror must do before it hands a file to
// nodes. Each iteration runs all three in turn, so machine noise falls on
// each alike.
//
// Sub-benchmarks: "disk" writes to the temporary directory; "tmpfs" to
// /dev/shm, where no disk sets the pace and what is left is CPU.
//
// The cores metrics are the process's CPU time over wall time: the registry
// double runs in this process, so they show how much of the machine a
// transfer used, the double's share included. They bound fetch/copy: the
// fetch does the copy's work plus a sha256 of every byte (BenchmarkSHA256
// gives its cost), so on a machine that the copy already keeps busy, the
// fetch can go no faster than the copy's CPU time plus the hash's, spread
// over every core.
func BenchmarkFetch1GiB(b *testing.B) {
	for _, where := range []struct{ name, dir string }{{"disk", ""}, {"tmpfs", "/dev/shm"}} {
		b.Run(where.name, func(b *testing.B) {
			dir := where.dir
			if dir == "" {
				dir = b.TempDir()
			} else if st, err := os.Stat(dir); err != nil || !st.IsDir() {
				b.Skipf("%s is not here, so nothing to compare on memory", dir)
			} else {
				var err error
				if dir, err = os.MkdirTemp(dir, "mirror-bench-"); err != nil {
					b.Skipf("cannot write in %s: %v", where.dir, err)
				}
				b.Cleanup(func() { os.RemoveAll(dir) })
			}
			benchFetch(b, dir)
		})
	}
}

// timed is the wall and CPU time of a run of transfers.
type timed struct{ wall, cpu time.Duration }

func (t *timed) add(f func()) {
	wall, cpu := time.Now(), cpuTime()
	f()
	t.wall += time.Since(wall)
	t.cpu += cpuTime() - cpu
}

func benchFetch(b *testing.B, dir string) {
	srv, f := benchHub(b)
	m := newMirror(b, srv, func(o *Options) { o.Dir = filepath.Join(dir, "mirror") })
	dst := filepath.Join(dir, "plain.gguf")
	var fetch, plain, verified timed
	b.ResetTimer()
	for range b.N {
		plain.add(func() { plainCopy(b, f.URL, dst, false) })
		os.Remove(dst)

		verified.add(func() { plainCopy(b, f.URL, dst, true) })
		os.Remove(dst)

		fetch.add(func() {
			if _, err := m.Fetch(context.Background(), []File{f}, nil); err != nil {
				b.Fatal(err)
			}
		})
		if err := m.Remove(context.Background(), f.Model, f.Revision, f.Path, nil); err != nil {
			b.Fatal(err)
		}
	}
	mbs := func(t timed) float64 { return float64(b.N) * benchSize / 1e6 / t.wall.Seconds() }
	b.ReportMetric(mbs(fetch), "fetch-MB/s")
	b.ReportMetric(mbs(plain), "copy-MB/s")
	b.ReportMetric(plain.wall.Seconds()/fetch.wall.Seconds(), "fetch/copy")
	b.ReportMetric(verified.wall.Seconds()/fetch.wall.Seconds(), "fetch/verified-copy")
	b.ReportMetric(plain.cpu.Seconds()/plain.wall.Seconds(), "copy-cores")
	b.ReportMetric(fetch.cpu.Seconds()/fetch.wall.Seconds(), "fetch-cores")
}

// plainCopy is io.Copy of the response to a file; verified, it also hashes
// what it copies, checks the sum and syncs the file.
func plainCopy(b *testing.B, url, dst string, verified bool) {
	resp, err := http.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := os.Create(dst)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	var w io.Writer = out
	h := sha256.New()
	if verified {
		w = io.MultiWriter(out, h)
	}
	if n, err := io.Copy(w, resp.Body); err != nil || n != benchSize {
		b.Fatalf("copied %d bytes: %v", n, err)
	}
	if verified {
		if hex.EncodeToString(h.Sum(nil)) != benchSum() {
			b.Fatal("the copy does not match the published sha256")
		}
		if err := out.Sync(); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime is the user and system time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSHA256 hashes from memory: the most a fetch can go on this
// machine when no core is free to hash beside the copy.
func BenchmarkSHA256(b *testing.B) {
	buf := make([]byte, bufSize)
	hubtest.Pattern(1)(0, buf)
	h := sha256.New()
	b.SetBytes(bufSize)
	for range b.N {
		h.Write(buf)
	}
}

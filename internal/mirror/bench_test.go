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
// bytes arrive, fsync, rename, sidecar — beside its baselines: a plain
// io.Copy of the same response to a file with nothing checked or synced,
// and the same copy followed by an fsync, the durability a mirror needs
// before it hands a file to nodes. Each iteration runs all three in turn, so
// machine noise falls on each alike. Sub-benchmarks: "disk" writes to the
// temporary directory; "tmpfs" to /dev/shm, where no disk sets the pace and
// what is left is the fetch's own work.
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

func benchFetch(b *testing.B, dir string) {
	_, f := benchHub(b)
	m := newMirror(b, func(o *Options) { o.Dir = filepath.Join(dir, "mirror") })
	dst := filepath.Join(dir, "plain.gguf")
	var fetch, plain, synced time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		plainCopy(b, f.URL, dst, false)
		plain += time.Since(start)
		os.Remove(dst)

		start = time.Now()
		plainCopy(b, f.URL, dst, true)
		synced += time.Since(start)
		os.Remove(dst)

		start = time.Now()
		if _, err := m.Fetch(context.Background(), []File{f}, nil); err != nil {
			b.Fatal(err)
		}
		fetch += time.Since(start)
		if err := m.Remove(context.Background(), f.Model, f.Revision, f.Path, nil); err != nil {
			b.Fatal(err)
		}
	}
	mbs := func(d time.Duration) float64 { return float64(b.N) * benchSize / 1e6 / d.Seconds() }
	b.ReportMetric(mbs(fetch), "fetch-MB/s")
	b.ReportMetric(mbs(plain), "copy-MB/s")
	b.ReportMetric(plain.Seconds()/fetch.Seconds(), "fetch/copy")
	b.ReportMetric(synced.Seconds()/fetch.Seconds(), "fetch/copy+fsync")
}

func plainCopy(b *testing.B, url, dst string, sync bool) {
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
	if n, err := io.Copy(out, resp.Body); err != nil || n != benchSize {
		b.Fatalf("copied %d bytes: %v", n, err)
	}
	if sync {
		if err := out.Sync(); err != nil {
			b.Fatal(err)
		}
	}
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

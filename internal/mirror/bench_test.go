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

// BenchmarkFetch1GiB is a whole fetch: redirect, download, sha256 as the
// bytes arrive, fsync, rename, sidecar. Compare with BenchmarkPlainCopy1GiB
// in the same run.
func BenchmarkFetch1GiB(b *testing.B) {
	_, f := benchHub(b)
	m := newMirror(b, nil)
	b.SetBytes(benchSize)
	b.ResetTimer()
	for range b.N {
		if _, err := m.Fetch(context.Background(), []File{f}, nil); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := m.Remove(context.Background(), f.Model, f.Revision, f.Path, nil); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkPlainCopy1GiB is the baseline: the same response copied to a
// file with io.Copy, nothing checked, nothing synced.
func BenchmarkPlainCopy1GiB(b *testing.B) {
	_, f := benchHub(b)
	dst := filepath.Join(b.TempDir(), "big.gguf")
	b.SetBytes(benchSize)
	b.ResetTimer()
	for range b.N {
		resp, err := http.Get(f.URL)
		if err != nil {
			b.Fatal(err)
		}
		out, err := os.Create(dst)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(out, resp.Body)
		resp.Body.Close()
		out.Close()
		if err != nil || n != benchSize {
			b.Fatalf("copied %d bytes: %v", n, err)
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

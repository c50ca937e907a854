package mirror

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"os"
	"path/filepath"
	"testing"
)

// fakeHFCache lays out a Hugging Face cache as huggingface_hub writes one:
// the blob named by its sha256, and the snapshot's path linking to it. It
// returns the blob's path.
func fakeHFCache(t *testing.T, cache, repo, commit, p, sum string, content []byte) string {
	t.Helper()
	dir := filepath.Join(cache, "models--"+filepath.Base(filepath.Dir(repo))+"--"+filepath.Base(repo))
	blob := filepath.Join(dir, "blobs", sum)
	snap := filepath.Join(dir, "snapshots", commit, filepath.FromSlash(p))
	for _, d := range []string{filepath.Dir(blob), filepath.Dir(snap)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(blob, content, 0o644); err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(filepath.Dir(snap), blob)
	if err := os.Symlink(rel, snap); err != nil {
		t.Fatal(err)
	}
	return blob
}

// TestFetchTakesAFileFromTheHFCache: a file the operator's Hugging Face
// cache already holds, with the sha256 the registry published, costs the
// registry not one byte; it is on the mirror, verified, and linked rather
// than copied when the cache is on the same disk.
func TestFetchTakesAFileFromTheHFCache(t *testing.T) {
	srv := newHub(t)
	content := randomish(3<<20, 7)
	f := addFile(t, srv, "tiny-Q4_K_M.gguf", content)
	cache := t.TempDir()
	blob := fakeHFCache(t, cache, repoID, "0123456789abcdef0123456789abcdef01234567", f.Path, f.SHA256, content)
	m := newMirror(t, srv, func(o *Options) { o.HFCache = cache })

	paths := mustFetch(t, m, f)
	mustHave(t, paths[0], content)
	if n := srv.BytesServed(repoID, f.Path); n != 0 {
		t.Errorf("the registry served %d bytes of a file in the Hugging Face cache", n)
	}
	if n := srv.Requests(repoID, f.Path); n != 0 {
		t.Errorf("the registry was asked %d times for a file in the Hugging Face cache", n)
	}
	a, _ := os.Stat(paths[0])
	b, _ := os.Stat(blob)
	if !os.SameFile(a, b) {
		t.Error("the file was copied from a cache on the same filesystem; a hard link costs no room")
	}
	list, err := m.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].State != Present || list[0].SHA256 != f.SHA256 {
		t.Errorf("the mirror lists %+v, want the file present with its sha256", list)
	}
}

// TestFetchPassesOverABadHFCacheBlob: a blob named for the sha256 with
// other bytes in it is not trusted by its name; the registry's file is
// fetched, and the cache is left as it was.
func TestFetchPassesOverABadHFCacheBlob(t *testing.T) {
	srv := newHub(t)
	content := randomish(1<<20, 8)
	f := addFile(t, srv, "tiny-Q4_K_M.gguf", content)
	cache := t.TempDir()
	bad := randomish(len(content), 9)
	blob := fakeHFCache(t, cache, repoID, "0123456789abcdef0123456789abcdef01234567", f.Path, f.SHA256, bad)
	m := newMirror(t, srv, func(o *Options) { o.HFCache = cache })

	paths := mustFetch(t, m, f)
	mustHave(t, paths[0], content)
	served(t, srv, f.Path, int64(len(content)), int64(len(content)))
	mustHave(t, blob, bad)
}

// TestCopyHashingVerifies: across filesystems the blob is copied, and what
// was written is what is hashed.
func TestCopyHashingVerifies(t *testing.T) {
	content := randomish(2<<20+17, 10)
	src := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(src, content, 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "x.gguf"+partialSuffix)
	h := newSHA256()
	var last int64
	if err := copyHashing(t.Context(), h, src, dst, func(n int64) { last = n }); err != nil {
		t.Fatal(err)
	}
	mustHave(t, dst, content)
	if got := hexSum(h); got != sha(content) || last != int64(len(content)) {
		t.Errorf("copied with sha256 %.12s and %d bytes reported, want %.12s and %d", got, last, sha(content), len(content))
	}
}

func newSHA256() hash.Hash      { return sha256.New() }
func hexSum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

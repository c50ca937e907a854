package mirror

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
)

const (
	repoID = "acme/tiny-GGUF"
	model  = "tiny"
)

// slack is how many bytes past the file's size the registry may serve in a
// test that expects a resume: what was in flight when a connection was cut
// or a fetch cancelled. A download that starts over costs far more.
const slack = 128 << 10

// newMirror is a mirror in a fresh directory with test-sized waits, that
// fetches from srv (nil: from local folders only).
func newMirror(t testing.TB, srv *hubtest.Server, edit func(*Options)) *Mirror {
	t.Helper()
	o := Options{
		Dir:           t.TempDir(),
		Backoff:       time.Millisecond,
		StallTimeout:  5 * time.Second,
		ProgressEvery: 10 * time.Millisecond,
		Log:           slog.New(slog.DiscardHandler),
	}
	if srv != nil {
		o.Registry = mustClient(t, srv, "")
	}
	if edit != nil {
		edit(&o)
	}
	m, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

// mustClient is a client of srv that never retries by itself, so that the
// tries a test counts are the mirror's own.
func mustClient(t testing.TB, srv *hubtest.Server, token string) *hf.Client {
	t.Helper()
	c, err := hf.NewClient(hf.Options{Endpoint: srv.URL(), Token: token, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newHub is a Hub with one empty public repository.
func newHub(t testing.TB) *hubtest.Server {
	t.Helper()
	srv := hubtest.New(t)
	srv.AddRepo(repoID, hubtest.RepoOptions{})
	return srv
}

// addFile adds content to the repository and returns the File to fetch it.
func addFile(t testing.TB, srv *hubtest.Server, p string, content []byte) File {
	t.Helper()
	commit := srv.AddFile(repoID, p, content)
	return hubFile(srv, commit, p, int64(len(content)), sha(content))
}

// hubFile is a file as the registry step would describe it: the resolve URL
// at a commit, the published size and sha256.
func hubFile(srv *hubtest.Server, commit, p string, size int64, sum string) File {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return File{
		Model:    model,
		Revision: commit[:7],
		Path:     p,
		URL:      srv.URL() + "/" + repoID + "/resolve/" + commit + "/" + strings.Join(segs, "/"),
		Size:     size,
		SHA256:   sum,
	}
}

// randomish is n bytes that repeat nowhere a resume off by a block would hide.
func randomish(n int, seed uint64) []byte {
	b := make([]byte, n)
	hubtest.Pattern(seed)(0, b)
	return b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func mustFetch(t testing.TB, m *Mirror, files ...File) []string {
	t.Helper()
	paths, err := m.Fetch(context.Background(), files, nil)
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	return paths
}

// mustHave fails unless the file at p holds exactly want.
func mustHave(t testing.TB, p string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("the fetched file: %v", err)
	}
	if sha(got) != sha(want) {
		t.Fatalf("%s holds %d bytes with sha256 %.12s, want %d bytes with %.12s", p, len(got), sha(got), len(want), sha(want))
	}
}

// files lists every file under dir, relative, sorted; folders are left out.
func files(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", dir, err)
	}
	slices.Sort(out)
	return out
}

// served fails unless the registry served between lo and hi bytes of p.
func served(t testing.TB, srv *hubtest.Server, p string, lo, hi int64) {
	t.Helper()
	// The registry counts a write once it returns, which may be a moment
	// after the client has the bytes and Fetch has returned: a count short
	// of lo is given that moment to catch up.
	got := srv.BytesServed(repoID, p)
	for deadline := time.Now().Add(2 * time.Second); got < lo && time.Now().Before(deadline); got = srv.BytesServed(repoID, p) {
		time.Sleep(5 * time.Millisecond)
	}
	if got < lo || got > hi {
		t.Errorf("the registry served %d bytes of %s, want %d to %d", got, p, lo, hi)
	}
}

package gguf

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"modelserve/internal/ggufgen"
)

// fileServer serves the files in dir with HEAD and Range as a mirror or the
// Hub's CDN does, counting the body bytes it sends and remembering every
// Authorization header it was given.
type fileServer struct {
	*httptest.Server
	served atomic.Int64
	mu     sync.Mutex
	auth   []string
}

func newFileServer(t testing.TB, dir string, wrap func(http.Handler) http.Handler) *fileServer {
	t.Helper()
	s := &fileServer{}
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		if a := r.Header.Get("Authorization"); a != "" {
			s.auth = append(s.auth, a)
		}
		s.mu.Unlock()
		f, err := os.Open(filepath.Join(dir, filepath.Base(r.URL.Path)))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		defer f.Close()
		http.ServeContent(countingWriter{w, &s.served}, r, f.Name(), time.Time{}, f)
	})
	if wrap != nil {
		h = wrap(h)
	}
	s.Server = httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

func (s *fileServer) authSeen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// padded writes a tiny model padded to 2 GiB: a big file whose header is a
// few kilobytes, taking no disk.
func padded(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := ggufgen.WriteFile(filepath.Join(dir, "big.gguf"), ggufgen.Spec{PadTo: 2 << 30, ChatTemplate: "{{ x }}"}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestReadHTTP(t *testing.T) {
	dir := padded(t)
	local, err := Read(context.Background(), filepath.Join(dir, "big.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		opts      []Option
		mostBytes int64
	}{
		{"default buffer", nil, 8 << 20},
		{"small buffer", []Option{WithBufferSize(64 << 10)}, 128 << 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFileServer(t, dir, nil)
			h, err := Read(context.Background(), srv.URL+"/big.gguf", tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if h.Size != 2<<30 || h.Architecture != "llama" || h.BlockCount != 2 || !h.ChatTemplate || h.Parameters != local.Parameters {
				t.Errorf("read %+v over HTTP; locally %+v", h, local)
			}
			if n := srv.served.Load(); n > tc.mostBytes || n == 0 {
				t.Errorf("the server sent %d bytes of a 2 GiB file for its header, want at most %d", n, tc.mostBytes)
			}
		})
	}
}

func TestReadHTTPBearer(t *testing.T) {
	dir := padded(t)
	cdn := newFileServer(t, dir, nil)
	// The registry: a gated file answers 401 without the token, and a
	// redirect to the CDN with it, as the Hub does.
	hub := newFileServer(t, dir, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer s3cret" {
				w.Header().Set("X-Error-Code", "GatedRepo")
				http.Error(w, `{"error":"access to this model is restricted"}`, http.StatusUnauthorized)
				return
			}
			if strings.HasPrefix(r.URL.Path, "/resolve/") {
				http.Redirect(w, r, cdn.URL+"/"+filepath.Base(r.URL.Path)+"?signed=1", http.StatusFound)
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	ctx := context.Background()

	t.Run("redirected to another host, the token stays behind", func(t *testing.T) {
		h, err := Read(ctx, hub.URL+"/resolve/main/big.gguf", WithBearer("s3cret"))
		if err != nil {
			t.Fatal(err)
		}
		if h.Architecture != "llama" {
			t.Errorf("read %q", h.Architecture)
		}
		if seen := cdn.authSeen(); len(seen) > 0 {
			t.Errorf("the CDN was sent %q", seen)
		}
	})
	t.Run("served by the token's own host", func(t *testing.T) {
		before := hub.served.Load()
		h, err := Read(ctx, hub.URL+"/big.gguf", WithBearer("s3cret"))
		if err != nil {
			t.Fatal(err)
		}
		if h.BlockCount != 2 || hub.served.Load() == before {
			t.Errorf("read %d blocks, %d bytes from the hub", h.BlockCount, hub.served.Load()-before)
		}
	})
	t.Run("no token", func(t *testing.T) {
		_, err := Read(ctx, hub.URL+"/resolve/main/big.gguf")
		if err == nil || !strings.Contains(err.Error(), "gated or private") {
			t.Errorf("error %v, want one saying the file is gated or private", err)
		}
	})
}

func TestReadHTTPRefuses(t *testing.T) {
	dir := padded(t)
	noRanges := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(noRanges.Close)
	srv := newFileServer(t, dir, nil)
	tests := []struct {
		name, url, want string
	}{
		{"missing file", srv.URL + "/nope.gguf", "the server answered 404 Not Found"},
		{"no Range support", noRanges.URL + "/big.gguf", "does not answer Range requests"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(context.Background(), tc.url)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.url) {
				t.Errorf("error %v, want one naming %s and saying %q", err, tc.url, tc.want)
			}
		})
	}
}

func TestReadHTTPSplit(t *testing.T) {
	dir := t.TempDir()
	if _, err := ggufgen.WriteSplit(dir, "m", ggufgen.Spec{}, 3); err != nil {
		t.Fatal(err)
	}
	srv := newFileServer(t, dir, nil)
	ctx := context.Background()
	whole, err := Read(ctx, srv.URL+"/m-00001-of-00003.gguf")
	if err != nil {
		t.Fatal(err)
	}
	alone, err := Read(ctx, srv.URL+"/m-00001-of-00003.gguf", OnlyThisFile())
	if err != nil {
		t.Fatal(err)
	}
	if whole.Shards != 3 || alone.Shards != 1 || alone.Parameters >= whole.Parameters {
		t.Errorf("the set read as %d shards of %d parameters, the first alone as %d of %d",
			whole.Shards, whole.Parameters, alone.Shards, alone.Parameters)
	}
}

// BenchmarkReadHeaderHTTP reads a 2 GiB model's header from a mirror, and
// reports how many bytes each read cost the server.
func BenchmarkReadHeaderHTTP(b *testing.B) {
	srv := newFileServer(b, padded(b), nil)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Read(ctx, srv.URL+"/big.gguf"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(srv.served.Load())/float64(b.N), "served-bytes/op")
}

// TestReadHTTPConcurrently reads headers of different shapes at once, as the
// planner and a job's check step do: each must come back as written.
func TestReadHTTPConcurrently(t *testing.T) {
	dir := t.TempDir()
	const files = 12
	for i := 0; i < files; i++ {
		s := ggufgen.Spec{BlockCount: uint32(2 + i%4), ContextLength: uint32(1024 * (i + 1))}
		if err := ggufgen.WriteFile(filepath.Join(dir, fmt.Sprintf("m%d.gguf", i)), s); err != nil {
			t.Fatal(err)
		}
	}
	srv := newFileServer(t, dir, nil)
	var wg sync.WaitGroup
	errs := make(chan error, files)
	for i := 0; i < files; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			h, err := Read(context.Background(), fmt.Sprintf("%s/m%d.gguf", srv.URL, i), OnlyThisFile())
			switch {
			case err != nil:
				errs <- fmt.Errorf("m%d: %w", i, err)
			case h.BlockCount != 2+i%4 || h.ContextLength != 1024*(i+1):
				errs <- fmt.Errorf("m%d read as %d blocks, %d context; written with %d, %d", i, h.BlockCount, h.ContextLength, 2+i%4, 1024*(i+1))
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestReadFileURL(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a model.gguf")
	if err := ggufgen.WriteFile(path, ggufgen.Spec{BlockCount: 3}); err != nil {
		t.Fatal(err)
	}
	u := (&url.URL{Scheme: "file", Path: path}).String()
	h, err := Read(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	if h.BlockCount != 3 {
		t.Errorf("read %d blocks from %s, want 3", h.BlockCount, u)
	}
}

package hf_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
	"modelserve/internal/mirror"
	"modelserve/internal/operr"
	"modelserve/internal/plan"
)

// mustRead opens u from offset (n bytes, or to the end for 0) and fails
// unless it reads exactly want.
func mustRead(t *testing.T, c interface {
	Open(context.Context, string, int64, int64) (*hf.Body, error)
}, u string, offset, n int64, want []byte) *hf.Body {
	t.Helper()
	b, err := c.Open(context.Background(), u, offset, n)
	if err != nil {
		t.Fatalf("Open(%s, %d, %d): %v", u, offset, n, err)
	}
	defer b.Close()
	got, err := io.ReadAll(b)
	if err != nil || string(got) != string(want) {
		t.Fatalf("Open(%s, %d, %d) read %q (%v), want %q", u, offset, n, got, err, want)
	}
	return b
}

func TestOpen(t *testing.T) {
	s := hubtest.New(t)
	host := strings.TrimPrefix(s.URL(), "http://")
	s.AddRepo("acme/m", hubtest.RepoOptions{})
	content := []byte("0123456789")
	s.AddFile("acme/m", "model.gguf", content)
	s.AddFileSpec("acme/m", hubtest.FileSpec{Path: "README.md", Content: []byte("# a model card"), InGit: true})
	commit := s.AddFile("acme/m", "ranges-ignored.gguf", content)
	s.IgnoreRange("acme/m", "ranges-ignored.gguf", true)
	c := mustClient(t, s.URL(), "")
	u := func(p string) string { return c.DownloadURL("acme/m", commit, p) }

	for _, tc := range []struct {
		name      string
		path      string
		offset, n int64
		want      string
		wantAt    int64
	}{
		{name: "the whole file", path: "model.gguf", want: "0123456789"},
		{name: "from an offset to the end", path: "model.gguf", offset: 4, want: "456789", wantAt: 4},
		{name: "a few bytes", path: "model.gguf", offset: 2, n: 3, want: "234", wantAt: 2},
		{name: "more than is left", path: "model.gguf", offset: 8, n: 100, want: "89", wantAt: 8},
		{name: "a file kept in git, from the Hub itself", path: "README.md", offset: 2, want: "a model card", wantAt: 2},
		{name: "Range ignored: the whole file from byte 0", path: "ranges-ignored.gguf", offset: 4, want: "0123456789"},
		{name: "Range ignored, but the whole file was asked for", path: "ranges-ignored.gguf", n: 10, want: "0123456789"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := mustRead(t, c, u(tc.path), tc.offset, tc.n, []byte(tc.want))
			size := int64(len(content))
			if tc.path == "README.md" {
				size = int64(len("# a model card"))
			}
			if b.Offset != tc.wantAt || b.Size != size {
				t.Errorf("the body starts at %d of %d bytes, want %d of %d", b.Offset, b.Size, tc.wantAt, size)
			}
		})
	}

	s.AddRepo("acme/gated", hubtest.RepoOptions{Gated: "manual"})
	gated := s.AddFile("acme/gated", "model.gguf", content)
	s.AddFile("acme/m", "forbidden.gguf", content)
	s.FailNext("acme/m", "forbidden.gguf", 403, 1)
	for _, tc := range []struct {
		name      string
		url       string
		offset, n int64
		is        error
		want      string
		// internal marks a refusal that is the program's, not the
		// operator's (logged, not shown).
		internal bool
	}{
		{name: "past the end", url: u("model.gguf"), offset: 11, is: hf.ErrRangeNotSatisfiable,
			want: host + " holds fewer than 12 bytes of acme/m file model.gguf"},
		{name: "a part, from a registry that sends the whole file", url: u("ranges-ignored.gguf"), offset: 2, n: 3,
			want: host + " does not answer Range requests for acme/m file ranges-ignored.gguf, so part of it cannot be read without all of it", internal: true},
		{name: "no such file", url: u("other.gguf"), is: hf.ErrNotFound,
			want: `acme/m has no file "other.gguf" at ` + commit[:7]},
		{name: "gated, no token", url: c.DownloadURL("acme/gated", gated, "model.gguf"), is: hf.ErrGated,
			want: "acme/gated is gated: set HF_TOKEN (or --hf-token) to a token of an account that has been granted access to it"},
		{name: "the CDN refuses", url: c.DownloadURL("acme/m", s.Commit("acme/m", "main"), "forbidden.gguf"),
			want: strings.TrimPrefix(s.CDNURL(), "http://") + ", where " + host +
				" sent the download of acme/m file forbidden.gguf, answered 403 Forbidden"},
		{name: "not a URL of the Hub", url: "ftp://example.com/x", want: `"ftp://example.com/x" is not a download URL of ` + host, internal: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := c.Open(context.Background(), tc.url, tc.offset, tc.n)
			if err == nil {
				b.Close()
				t.Fatal("no error")
			}
			if err.Error() != tc.want {
				t.Errorf("the operator reads\n %s\nwant\n %s", err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("errors.Is(%v) is false", tc.is)
			}
			// What the registry refuses is said to the operator, the
			// CDN's refusals too; a job shows it as it is.
			if _, shown := operr.As(err); shown == tc.internal {
				t.Errorf("shown to the operator: %v, want %v", shown, !tc.internal)
			}
		})
	}
}

func TestRegistriesOpen(t *testing.T) {
	ctx := context.Background()
	s := hubtest.New(t)
	s.AddRepo("acme/m", hubtest.RepoOptions{})
	commit := s.AddFile("acme/m", "model.gguf", []byte("hub bytes"))
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "mine"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "mine", "mine.gguf"), []byte("local bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	hub, local := mustClient(t, s.URL(), ""), hf.NewLocal(root, "")
	regs := hf.Registries{Hub: hub, Local: local}
	hubURL, localURL := hub.DownloadURL("acme/m", commit, "model.gguf"), local.DownloadURL("local/mine", "", "mine.gguf")

	mustRead(t, regs, hubURL, 4, 0, []byte("bytes"))
	b := mustRead(t, regs, localURL, 6, 3, []byte("byt"))
	if b.Offset != 6 || b.Size != 11 {
		t.Errorf("the local body starts at %d of %d bytes, want 6 of 11", b.Offset, b.Size)
	}
	// Without a Hub, local folders still read: the mirror's default.
	mustRead(t, hf.Registries{}, localURL, 0, 0, []byte("local bytes"))

	for _, tc := range []struct {
		name string
		regs hf.Registries
		url  string
		is   error
		want string
	}{
		{"past the end of a local file", regs, localURL, hf.ErrRangeNotSatisfiable, "holds fewer than 21 bytes"},
		{"a local file gone", regs, local.DownloadURL("local/mine", "", "gone.gguf"), hf.ErrNotFound,
			"is not in its folder any more: it was moved or deleted after the folder was listed"},
		{"no Hub", hf.Registries{Local: local}, hubURL, nil, "no Hub is configured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.regs.Open(ctx, tc.url, 20, 0)
			if err == nil {
				b.Close()
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Errorf("Open: %v, want %q (errors.Is %v)", err, tc.want, tc.is)
			}
		})
	}

	t.Run("a local read stops with its context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		b, err := regs.Open(ctx, localURL, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		cancel()
		if _, err := b.Read(make([]byte, 4)); !errors.Is(err, context.Canceled) {
			t.Errorf("reading after the context ended: %v", err)
		}
	})
}

// The one rule, proved for both of its users at once: the mirror fetching a
// gated model and the planner reading its header both reach the file
// through Open, so both carry the token to the Hub and neither to the CDN
// it redirects to; without the token both get the gated sentence.
func TestTokenStaysOnTheHubForEveryReader(t *testing.T) {
	s := hubtest.New(t)
	s.AddRepo("acme/gated", hubtest.RepoOptions{Gated: "manual"})
	s.AddToken("hf_granted", "acme/gated")
	content := ggufgen.Bytes(ggufgen.Spec{})
	commit := s.AddFile("acme/gated", "tiny-Q8_0.gguf", content)

	for _, tc := range []struct {
		name, token string
		is          error
	}{
		{name: "a granted token", token: "hf_granted"},
		{name: "no token", is: hf.ErrGated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.ResetCounters()
			regs := hf.Registries{Hub: mustClient(t, s.URL(), tc.token)}
			u := regs.DownloadURL("acme/gated", commit, "tiny-Q8_0.gguf")
			mir, err := mirror.New(mirror.Options{Dir: t.TempDir(), Registry: regs, MaxRetries: -1, Log: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}

			_, fetchErr := mir.Fetch(context.Background(), []mirror.File{{Model: "tiny", Revision: commit[:7],
				Path: "tiny-Q8_0.gguf", URL: u, Size: int64(len(content)), SHA256: sha(content)}}, nil)
			h, headerErr := plan.ReadHeaders(regs)(context.Background(), u)

			if s.CDNSawAuthorization() {
				t.Error("the token reached the CDN")
			}
			for what, err := range map[string]error{"the mirror": fetchErr, "the header reader": headerErr} {
				if tc.is == nil && err != nil {
					t.Errorf("%s: %v", what, err)
				}
				if tc.is != nil && !errors.Is(err, tc.is) {
					t.Errorf("%s: %v, want errors.Is %v", what, err, tc.is)
				}
			}
			if tc.is != nil {
				return
			}
			if h.Architecture != "llama" {
				t.Errorf("the header reads as %q, want llama", h.Architecture)
			}
			var hubAuthed, cdn int
			for _, r := range s.Log() {
				switch {
				case r.Server == "hub" && strings.Contains(r.URL, "/resolve/") && r.Authorization == "Bearer "+tc.token:
					hubAuthed++
				case r.Server == "cdn":
					cdn++
				}
			}
			// One resolve for the fetch, at least one for the header.
			if hubAuthed < 2 || cdn < 2 {
				t.Errorf("%d resolves carried the token and %d requests reached the CDN, want 2 or more of each: "+
					"the test proves nothing", hubAuthed, cdn)
			}
		})
	}
}

package hf_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
)

// mustClient is a client of the test Hub that retries within milliseconds.
func mustClient(t *testing.T, endpoint, token string) *hf.Client {
	t.Helper()
	c, err := hf.NewClient(hf.Options{Endpoint: endpoint, Token: token, Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustRepo(t *testing.T, c *hf.Client, id, rev string) hf.Repo {
	t.Helper()
	r, err := c.Repo(context.Background(), id, rev)
	if err != nil {
		t.Fatalf("reading %s at %q: %v", id, rev, err)
	}
	return r
}

// hubRequests lists the Hub (not CDN) requests whose path starts with prefix.
func hubRequests(s *hubtest.Server, prefix string) []hubtest.LoggedRequest {
	var out []hubtest.LoggedRequest
	for _, r := range s.Log() {
		if r.Server == "hub" && strings.HasPrefix(r.URL, prefix) {
			out = append(out, r)
		}
	}
	return out
}

func TestRepoReadsEveryPage(t *testing.T) {
	s := hubtest.New(t)
	s.AddRepo("acme/big", hubtest.RepoOptions{})
	var want []hf.File
	add := func(p string, content []byte, inGit bool) {
		s.AddFileSpec("acme/big", hubtest.FileSpec{Path: p, Content: content, InGit: inGit})
		f := hf.File{Path: p, Size: int64(len(content))}
		if !inGit {
			f.SHA256 = sha(content)
		}
		want = append(want, f)
	}
	add("Q4_K_M/model-00001-of-00002.gguf", []byte("shard one"), false)
	add("Q4_K_M/model-00002-of-00002.gguf", []byte("shard two, longer"), false)
	add("Q8_0/model.gguf", []byte("eight bits"), false)
	add("mmproj-f16.gguf", []byte("projector"), false)
	add("model-Q2_K.gguf", []byte("two"), false)
	add("deep/er/still.gguf", []byte("nested twice"), false)
	add("config.json", []byte(`{"architectures":["LlamaForCausalLM"]}`), true)
	s.SetPageSize(2)

	got := mustRepo(t, mustClient(t, s.URL(), ""), "acme/big", "")
	wantSorted := append([]hf.File(nil), want...)
	sortFiles(wantSorted)
	if !reflect.DeepEqual(got.Files, wantSorted) {
		t.Errorf("files\n got %+v\nwant %+v", got.Files, wantSorted)
	}
	commit := s.Commit("acme/big", "main")
	if got.ID != "acme/big" || got.Revision != "main" || got.Commit != commit {
		t.Errorf("repo %s at %q = %s, want acme/big at main = %s", got.ID, got.Revision, got.Commit, commit)
	}
	// 7 files and 4 folders make 11 entries: 6 pages of 2, every one read
	// at the commit, not at the moving branch.
	pages := hubRequests(s, "/api/models/acme/big/tree/")
	if len(pages) != 6 {
		t.Errorf("%d tree pages read, want 6", len(pages))
	}
	for _, p := range pages {
		if !strings.HasPrefix(p.URL, "/api/models/acme/big/tree/"+commit+"?") {
			t.Errorf("a tree page was read at %s, not at the commit", p.URL)
		}
	}
}

func sortFiles(fs []hf.File) {
	for i := range fs {
		for j := i + 1; j < len(fs); j++ {
			if fs[j].Path < fs[i].Path {
				fs[i], fs[j] = fs[j], fs[i]
			}
		}
	}
}

func TestRepoIsPinnedToACommit(t *testing.T) {
	s := hubtest.New(t)
	s.AddRepo("acme/m", hubtest.RepoOptions{})
	first := s.AddFile("acme/m", "a.gguf", []byte("a"))
	s.SetRef("acme/m", "refs/pr/1", first)
	s.SetRef("acme/m", "v1.0", first)
	second := s.AddFile("acme/m", "b.gguf", []byte("b"))
	c := mustClient(t, s.URL(), "")

	for _, tc := range []struct {
		name, rev, commit string
		files             int
	}{
		{"branch follows its head", "main", second, 2},
		{"empty revision means main", "", second, 2},
		{"a commit read after the branch moved", first, first, 1},
		{"a tag", "v1.0", first, 1},
		{"a pull request ref, escaped on the way", "refs/pr/1", first, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRepo(t, c, "acme/m", tc.rev)
			if r.Commit != tc.commit || len(r.Files) != tc.files {
				t.Errorf("commit %s with %d files, want %s with %d", r.Commit, len(r.Files), tc.commit, tc.files)
			}
		})
	}
	if len(hubRequests(s, "/api/models/acme/m/revision/refs%2Fpr%2F1")) != 1 {
		t.Error("refs/pr/1 was not sent as one escaped segment")
	}
}

// TestRefusals covers every way the Hub refuses a request: the
// sentence is what the operator reads, the sentinel what the job branches on.
func TestRefusals(t *testing.T) {
	s := hubtest.New(t)
	host := strings.TrimPrefix(s.URL(), "http://")
	s.AddRepo("acme/open", hubtest.RepoOptions{})
	open := s.AddFile("acme/open", "model.gguf", []byte("weights"))
	s.AddRepo("acme/gated", hubtest.RepoOptions{Gated: "manual"})
	gated := s.AddFile("acme/gated", "model.gguf", []byte("weights"))
	s.AddRepo("acme/secret", hubtest.RepoOptions{Private: true})
	s.AddRepo("acme/gone", hubtest.RepoOptions{})
	s.SetDisabled("acme/gone", true)
	s.AddRepo("acme/busy", hubtest.RepoOptions{})
	s.AddRepo("acme/broken", hubtest.RepoOptions{})
	s.AddToken("hf_plain")

	readRepo := func(id, rev string) func(*hf.Client) error {
		return func(c *hf.Client) error { _, err := c.Repo(context.Background(), id, rev); return err }
	}
	download := func(id, commit, path string) func(*hf.Client) error {
		return func(c *hf.Client) error {
			return c.CanDownload(context.Background(), hf.Repo{ID: id, Revision: "main", Commit: commit}, path)
		}
	}
	for _, tc := range []struct {
		name  string
		token string
		setup func()
		call  func(*hf.Client) error
		is    error
		want  string
	}{
		{name: "revision does not exist", call: readRepo("acme/open", "v9"), is: hf.ErrRevisionNotFound,
			want: `acme/open has no revision "v9": name one of its branches, tags or commits`},
		{name: "file does not exist", call: download("acme/open", open, "other.gguf"), is: hf.ErrNotFound,
			want: `acme/open has no file "other.gguf" at ` + open[:7]},
		{name: "gated, no token", call: download("acme/gated", gated, "model.gguf"), is: hf.ErrGated,
			want: "acme/gated is gated: set HF_TOKEN (or --hf-token) to a token of an account that has been granted access to it"},
		{name: "gated, token not approved", token: "hf_plain", call: download("acme/gated", gated, "model.gguf"), is: hf.ErrGated,
			want: "acme/gated is gated and the token's account has not been granted access: request access on " +
				s.URL() + "/acme/gated and wait for approval"},
		{name: "private repository, anonymous", call: readRepo("acme/secret", ""), is: hf.ErrNotFound,
			want: "acme/secret does not exist on " + host + ", or it is private: for a private repository, " +
				"set HF_TOKEN (or --hf-token) to a token of an account that can read it"},
		{name: "missing repository, anonymous", call: readRepo("acme/nothing", ""), is: hf.ErrNotFound,
			want: "acme/nothing does not exist on " + host + ", or it is private: for a private repository, " +
				"set HF_TOKEN (or --hf-token) to a token of an account that can read it"},
		{name: "missing repository, with a token", token: "hf_plain", call: readRepo("acme/nothing", ""), is: hf.ErrNotFound,
			want: "there is no repository acme/nothing on " + host + ": check the owner and the name"},
		{name: "private repository, token not granted", token: "hf_plain", call: readRepo("acme/secret", ""), is: hf.ErrNotFound,
			want: "there is no repository acme/secret on " + host + ": check the owner and the name"},
		{name: "bad token", token: "hf_typo", call: readRepo("acme/open", ""), is: hf.ErrUnauthorized,
			want: host + " refused the token while reading acme/open: check HF_TOKEN (or --hf-token); it may be mistyped, expired or revoked"},
		{name: "disabled repository", call: readRepo("acme/gone", ""), is: hf.ErrDisabled,
			want: "acme/gone has been disabled by its owner or by " + host + ": its files cannot be fetched"},
		{name: "rate limited through every retry", setup: func() { s.FailNext("acme/busy", "", 429, 5) },
			call: readRepo("acme/busy", ""), is: hf.ErrUnavailable,
			want: host + " kept answering 429 Too Many Requests for acme/busy through 5 tries " +
				"(it is limiting how often this machine may ask): try again later"},
		{name: "server errors through every retry", setup: func() { s.FailNext("acme/broken", "", 502, 5) },
			call: download("acme/broken", "", "x.gguf"), is: hf.ErrUnavailable,
			want: host + " kept answering 502 Bad Gateway for acme/broken through 5 tries (it is having trouble): try again later"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup()
			}
			err := tc.call(mustClient(t, s.URL(), tc.token))
			if err == nil {
				t.Fatal("no error")
			}
			if err.Error() != tc.want {
				t.Errorf("the operator reads\n %s\nwant\n %s", err, tc.want)
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("errors.Is(%v) is false", tc.is)
			}
		})
	}
}

func TestGatedRepoListsButMayNotDownload(t *testing.T) {
	s := hubtest.New(t)
	for _, kind := range []string{"auto", "manual"} {
		id := "acme/gated-" + kind
		s.AddRepo(id, hubtest.RepoOptions{Gated: kind})
		s.AddFile(id, "model.gguf", []byte("weights"))
	}
	s.AddToken("hf_granted", "acme/gated-manual")
	anon := mustClient(t, s.URL(), "")
	granted := mustClient(t, s.URL(), "hf_granted")

	for _, kind := range []string{"auto", "manual"} {
		r := mustRepo(t, anon, "acme/gated-"+kind, "")
		if r.Gated != kind || len(r.Files) != 1 || r.Files[0].SHA256 != sha([]byte("weights")) {
			t.Errorf("anonymous read of a %s-gated repository: %+v", kind, r)
		}
		if err := anon.CanDownload(context.Background(), r, ""); !errors.Is(err, hf.ErrGated) {
			t.Errorf("anonymous CanDownload on %s gating: %v, want the gated sentence", kind, err)
		}
	}
	r := mustRepo(t, granted, "acme/gated-manual", "")
	if err := granted.CanDownload(context.Background(), r, "model.gguf"); err != nil {
		t.Errorf("a granted token may not download: %v", err)
	}
	if n := len(s.Log()); s.Log()[n-1].Server != "hub" {
		t.Error("CanDownload followed the redirect to the CDN")
	}
	open := mustRepo(t, granted, "acme/gated-auto", "")
	if err := granted.CanDownload(context.Background(), open, ""); !errors.Is(err, hf.ErrGated) {
		t.Errorf("a token granted another repository: %v, want the gated sentence", err)
	}
}

func TestTokenNeverReachesTheCDN(t *testing.T) {
	s := hubtest.New(t)
	s.AddRepo("acme/gated", hubtest.RepoOptions{Gated: "manual"})
	content := []byte("gated weights")
	commit := s.AddFile("acme/gated", "Q4_K_M/model.gguf", content)
	s.AddToken("hf_granted", "acme/gated")
	c := mustClient(t, s.URL(), "hf_granted")
	u := c.DownloadURL("acme/gated", commit, "Q4_K_M/model.gguf")

	mustRead(t, c, u, 0, 0, content)
	if s.CDNSawAuthorization() {
		t.Error("the token reached the CDN")
	}
	resolves := hubRequests(s, "/acme/gated/resolve/")
	if len(resolves) != 1 || resolves[0].Authorization != "Bearer hf_granted" {
		t.Errorf("the Hub's resolve should carry the token: %+v", resolves)
	}

	// The control: Go's own client keeps the header when only the port
	// differs, which is why Open needs its own redirect rule.
	s.ResetCounters()
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("Authorization", "Bearer hf_granted")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != string(content) {
		t.Fatalf("Go's client: %s %q", resp.Status, body)
	}
	if !s.CDNSawAuthorization() {
		t.Error("the control did not leak: this test no longer shows anything")
	}

	// A caller's own HTTP client keeps its redirect rule and gains ours.
	s.ResetCounters()
	var theirs int
	own, err := hf.NewClient(hf.Options{Endpoint: s.URL(), Token: "hf_granted", HTTP: &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { theirs++; return nil },
	}})
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, own, u, 0, 0, content)
	if s.CDNSawAuthorization() || theirs != 1 {
		t.Errorf("with the caller's client: CDN saw the token %v, their CheckRedirect ran %d times", s.CDNSawAuthorization(), theirs)
	}
}

func TestRetries(t *testing.T) {
	s := hubtest.New(t)
	s.AddRepo("acme/m", hubtest.RepoOptions{})
	s.AddFile("acme/m", "model.gguf", []byte("w"))
	c := mustClient(t, s.URL(), "")
	for _, tc := range []struct {
		name   string
		status int
		times  int
	}{
		{"rate limited twice", 429, 2},
		{"server error three times", 500, 3},
		{"unavailable four times, the last retry", 503, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.ResetCounters()
			s.FailNext("acme/m", "", tc.status, tc.times)
			r := mustRepo(t, c, "acme/m", "")
			if len(r.Files) != 1 {
				t.Errorf("files %+v", r.Files)
			}
			if n := len(hubRequests(s, "/api/models/acme/m/revision/")); n != tc.times+1 {
				t.Errorf("%d model info requests, want %d", n, tc.times+1)
			}
		})
	}
	t.Run("Retry-After is honoured", func(t *testing.T) {
		s.SetRetryAfter(1)
		defer s.SetRetryAfter(0)
		s.FailNext("acme/m", "", 429, 1)
		start := time.Now()
		mustRepo(t, c, "acme/m", "")
		if took := time.Since(start); took < time.Second {
			t.Errorf("retried after %s, before the second Retry-After asked for", took)
		}
	})
	t.Run("a download is retried too", func(t *testing.T) {
		s.ResetCounters()
		s.FailNext("acme/m", "model.gguf", 503, 2)
		u := c.DownloadURL("acme/m", s.Commit("acme/m", "main"), "model.gguf")
		mustRead(t, c, u, 0, 0, []byte("w"))
		if n := s.Requests("acme/m", "model.gguf"); n != 3 {
			t.Errorf("%d downloads, want 3", n)
		}
	})
	t.Run("a failed download check is retried too", func(t *testing.T) {
		s.FailNext("acme/m", "", 500, 2)
		if err := c.CanDownload(context.Background(), hf.Repo{ID: "acme/m", Revision: "main"}, "model.gguf"); err != nil {
			t.Error(err)
		}
	})
	t.Run("a cancelled context stops the waiting", func(t *testing.T) {
		slow, _ := hf.NewClient(hf.Options{Endpoint: s.URL(), Backoff: time.Hour})
		s.FailNext("acme/m", "", 500, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := slow.Repo(ctx, "acme/m", "")
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
			t.Errorf("after %s: %v", time.Since(start), err)
		}
		s.ClearFaults("acme/m", "")
	})
}

func TestUnsafePathsFromTheRegistry(t *testing.T) {
	for _, tc := range []struct {
		name, path string
	}{
		{"climbs out", "../../etc/cron.d/x.gguf"},
		{"climbs out half way", "Q4/../../x.gguf"},
		{"starts at the root", "/etc/passwd"},
		{"backslash", `Q4\..\x.gguf`},
		{"NUL", "model\x00.gguf"},
		{"control character", "model\x1b[2J.gguf"},
		{"empty folder", "Q4//model.gguf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := hubtest.New(t)
			s.AddRepo("acme/bad", hubtest.RepoOptions{})
			s.AddFile("acme/bad", "fine.gguf", []byte("ok"))
			commit := s.AddRawTreeEntry("acme/bad", hubtest.TreeEntry{Type: "file", Path: tc.path, Size: 2, OID: strings.Repeat("0", 40)})
			_, err := mustClient(t, s.URL(), "").Repo(context.Background(), "acme/bad", "")
			want := "acme/bad at " + commit[:7] + ": " + hf.CheckPath(tc.path).Error()
			if err == nil || err.Error() != want {
				t.Errorf("got %v\nwant %s", err, want)
			}
		})
	}
	t.Run("a sha256 that is not one", func(t *testing.T) {
		s := hubtest.New(t)
		s.AddRepo("acme/bad", hubtest.RepoOptions{})
		s.AddRawTreeEntry("acme/bad", hubtest.TreeEntry{Type: "file", Path: "m.gguf", Size: 2,
			LFS: &hubtest.TreeLFS{OID: "not-a-hash", Size: 2}})
		_, err := mustClient(t, s.URL(), "").Repo(context.Background(), "acme/bad", "")
		if err == nil || !strings.Contains(err.Error(), `published "not-a-hash" as the sha256 of m.gguf`) {
			t.Errorf("got %v", err)
		}
	})
}

func TestDownloadURL(t *testing.T) {
	s := hubtest.New(t)
	s.AddRepo("acme/m", hubtest.RepoOptions{})
	name := "Q4_K_M/model v1#2?.gguf"
	commit := s.AddFile("acme/m", name, []byte("odd name"))
	c := mustClient(t, s.URL()+"/", "")
	u := c.DownloadURL("acme/m", commit, name)
	if want := s.URL() + "/acme/m/resolve/" + commit + "/Q4_K_M/model%20v1%232%3F.gguf"; u != want {
		t.Fatalf("got %s\nwant %s", u, want)
	}
	mustRead(t, c, u, 0, 0, []byte("odd name"))
	if got := mustClient(t, "", "").DownloadURL("a/b", "main", "x.gguf"); got != "https://huggingface.co/a/b/resolve/main/x.gguf" {
		t.Errorf("default endpoint: %s", got)
	}
}

func TestNewClientRefusesBadEndpoints(t *testing.T) {
	for _, e := range []string{"huggingface.co", "ftp://huggingface.co", "https://", "https://u:p@huggingface.co", "https://h.co/?x=1"} {
		t.Run(e, func(t *testing.T) {
			_, err := hf.NewClient(hf.Options{Endpoint: e})
			if err == nil || !strings.Contains(err.Error(), "check HF_ENDPOINT") {
				t.Errorf("got %v", err)
			}
		})
	}
}

func TestUnreachableRegistry(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + l.Addr().String()
	l.Close()
	c, _ := hf.NewClient(hf.Options{Endpoint: endpoint, MaxRetries: 2, Backoff: time.Millisecond})
	_, err = c.Repo(context.Background(), "acme/m", "")
	var opErr *net.OpError
	if err == nil || !strings.HasPrefix(err.Error(), "could not reach "+endpoint+" to read acme/m: ") || !errors.As(err, &opErr) {
		t.Errorf("got %v", err)
	}
}

// TestOddAnswers serves answers hubtest never gives but a registry might.
func TestOddAnswers(t *testing.T) {
	commit := strings.Repeat("c", 40)
	for _, tc := range []struct {
		name  string
		info  string
		pages map[string]string // cursor → Link header of that page
		want  string            // error text, or "" for gated "auto" with 3 files
	}{
		{name: "gated true and relative next links", info: `{"id":"acme/m","sha":"` + commit + `","gated":true}`,
			pages: map[string]string{"": `</api/models/acme/m/tree/` + commit + `?cursor=2>; rel="next"`,
				"2": `<https://elsewhere.example/x>; rel="prev", </api/models/acme/m/tree/` + commit + `?cursor=3>; rel="last next"`,
				"3": ""}},
		{name: "no commit", info: `{"id":"acme/m","gated":false}`,
			want: `127.0.0.1 described acme/m at "main" without a commit id (it said "")`},
		{name: "gated is a number", info: `{"id":"acme/m","sha":"` + commit + `","gated":3}`,
			want: `127.0.0.1 described acme/m: gated is 3, which is neither false nor a kind of gating`},
		{name: "next links that loop", info: `{"id":"acme/m","sha":"` + commit + `"}`,
			pages: map[string]string{"": `</api/models/acme/m/tree/` + commit + `?cursor=2>; rel="next"`,
				"2": `</api/models/acme/m/tree/` + commit + `?cursor=2>; rel="next"`},
			want: "127.0.0.1 kept sending more pages of acme/m's file list after 2; the listing does not end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.Contains(r.URL.Path, "/revision/") {
					io.WriteString(w, tc.info)
					return
				}
				cur := r.URL.Query().Get("cursor")
				if l := tc.pages[cur]; l != "" {
					w.Header().Set("Link", l)
				}
				fmt.Fprintf(w, `[{"type":"file","path":"f%s.gguf","size":1}]`, cur)
			}))
			defer srv.Close()
			c := mustClient(t, srv.URL, "")
			r, err := c.Repo(context.Background(), "acme/m", "")
			want := strings.ReplaceAll(tc.want, "127.0.0.1", strings.TrimPrefix(srv.URL, "http://"))
			switch {
			case tc.want != "" && (err == nil || err.Error() != want):
				t.Errorf("got %v\nwant %s", err, want)
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want == "" && (r.Gated != "auto" || len(r.Files) != 3):
				t.Errorf("gated %q, %d files; want auto, 3", r.Gated, len(r.Files))
			}
		})
	}
}

func TestResolveToken(t *testing.T) {
	home := t.TempDir()
	write := func(p, s string) string {
		t.Helper()
		full := filepath.Join(home, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return full
	}
	write(".cache/huggingface/token", "hf_default\n")
	write("xdg/huggingface/token", "hf_xdg\n")
	hfHome := filepath.Dir(write("hfhome/token", "  hf_home  \n"))
	custom := write("elsewhere/tok", "hf_path\n")

	for _, tc := range []struct {
		name string
		flag string
		env  map[string]string
		want string
	}{
		{"the flag wins", " hf_flag ", map[string]string{"HF_TOKEN": "hf_env", "HOME": home}, "hf_flag"},
		{"HF_TOKEN", "", map[string]string{"HF_TOKEN": "hf_env", "HUGGING_FACE_HUB_TOKEN": "hf_old"}, "hf_env"},
		{"the older variable", "", map[string]string{"HUGGING_FACE_HUB_TOKEN": "hf_old", "HF_TOKEN_PATH": custom}, "hf_old"},
		{"an empty variable counts as unset", "", map[string]string{"HF_TOKEN": "  ", "HF_TOKEN_PATH": custom}, "hf_path"},
		{"HF_TOKEN_PATH", "", map[string]string{"HF_TOKEN_PATH": custom, "HF_HOME": hfHome}, "hf_path"},
		{"HF_TOKEN_PATH with ~", "", map[string]string{"HF_TOKEN_PATH": "~/elsewhere/tok", "HOME": home}, "hf_path"},
		{"HF_TOKEN_PATH replaces the default file", "", map[string]string{"HF_TOKEN_PATH": filepath.Join(home, "none"), "HOME": home}, ""},
		{"HF_HOME, trimmed", "", map[string]string{"HF_HOME": hfHome, "HOME": home}, "hf_home"},
		{"XDG_CACHE_HOME", "", map[string]string{"XDG_CACHE_HOME": filepath.Join(home, "xdg"), "HOME": home}, "hf_xdg"},
		{"~/.cache/huggingface/token", "", map[string]string{"HOME": home}, "hf_default"},
		{"nothing anywhere", "", map[string]string{"HOME": t.TempDir()}, ""},
		{"no home at all", "", map[string]string{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := hf.ResolveToken(tc.flag, func(k string) string { return tc.env[k] }); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// TestARegistryErrorIsBoundedAndScrubbed: a registry that answers with a
// message of 600 KB echoing the request's Authorization header gives an
// error (which the job logs and shows) of a few hundred bytes, without the
// token, in the Bearer form or alone.
func TestARegistryErrorIsBoundedAndScrubbed(t *testing.T) {
	s := hubtest.New(t)
	s.AddRepo("acme/open", hubtest.RepoOptions{})
	// A Hub token has a shape of its own; a mirror's may look like
	// anything, and is known as the one configured.
	for _, token := range []string{"hf_EchoedBackByAProxy0123456789abcd", "plain-mirror-secret-0451"} {
		s.AddToken(token, "acme/open")
		t.Run(token[:3], func(t *testing.T) { refusalSaysNoToken(t, s, token) })
	}
}

func refusalSaysNoToken(t *testing.T, s *hubtest.Server, token string) {
	for name, say := range map[string]func(*http.Request) string{
		"the header first": func(r *http.Request) string {
			return "bad request; you sent Authorization: " + r.Header.Get("Authorization") + " " + strings.Repeat("x", 600<<10)
		},
		"the token alone": func(r *http.Request) string {
			return "the token " + strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ") + " is refused " + strings.Repeat("x", 600<<10)
		},
	} {
		t.Run(name, func(t *testing.T) {
			s.FailNextSaying("acme/open", http.StatusBadRequest, 1, say)
			_, err := mustClient(t, s.URL(), token).Repo(context.Background(), "acme/open", "main")
			if err == nil {
				t.Fatal("a refusal was read as an answer")
			}
			if msg := err.Error(); len(msg) > 1<<10 || strings.Contains(msg, token) || strings.Contains(msg, token[3:]) {
				t.Errorf("the registry's refusal is an error of %d bytes: %.600s", len(msg), msg)
			}
			if !strings.Contains(err.Error(), "KB cut)") {
				t.Errorf("the error does not say the registry's message was cut: %.600s", err)
			}
		})
	}
}

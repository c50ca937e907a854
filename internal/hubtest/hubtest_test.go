package hubtest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"modelserve/internal/hubtest"
)

// noFollow stops at the Hub's redirect so its headers can be read.
var noFollow = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func mustDo(t *testing.T, hc *http.Client, method, url, token, rng string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return resp, body
}

// mustCDNURL resolves a file and returns where the Hub sent the download.
func mustCDNURL(t *testing.T, s *hubtest.Server, id, rev, path string) string {
	t.Helper()
	resp, body := mustDo(t, noFollow, "GET", s.URL()+"/"+id+"/resolve/"+rev+"/"+path, "", "")
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("resolve %s: got %s %s, want 302", path, resp.Status, body)
	}
	return resp.Header.Get("Location")
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func TestErrorAnswers(t *testing.T) {
	s := hubtest.New(t)
	s.AddRepo("acme/open", hubtest.RepoOptions{})
	s.AddFile("acme/open", "model.gguf", []byte("weights"))
	s.AddRepo("acme/gated", hubtest.RepoOptions{Gated: "manual"})
	s.AddFile("acme/gated", "model.gguf", []byte("weights"))
	s.AddRepo("acme/secret", hubtest.RepoOptions{Private: true})
	s.AddRepo("acme/gone", hubtest.RepoOptions{})
	s.SetDisabled("acme/gone", true)
	s.AddToken("hf_plain")
	s.AddToken("hf_granted", "acme/gated", "acme/secret")

	for _, tc := range []struct {
		name, method, path, token string
		status                    int
		code, message             string
	}{
		{"revision does not exist", "GET", "/api/models/acme/open/revision/nope", "",
			404, "RevisionNotFound", "Invalid rev id: nope"},
		{"file does not exist", "GET", "/acme/open/resolve/main/missing.gguf", "",
			404, "EntryNotFound", "Entry not found"},
		{"gated, no token", "GET", "/acme/gated/resolve/main/model.gguf", "",
			401, "GatedRepo", "Access to model acme/gated is restricted. You must have access to it and be authenticated to access it. Please log in."},
		{"gated, token not approved", "HEAD", "/acme/gated/resolve/main/model.gguf", "hf_plain",
			403, "GatedRepo", "Access to model acme/gated is restricted and you are not in the authorized list. Visit " + s.URL() + "/acme/gated to ask for access."},
		{"private repository, anonymous", "GET", "/api/models/acme/secret", "",
			401, "RepoNotFound", "Repository not found"},
		{"missing repository, anonymous", "GET", "/api/models/acme/nothing/tree/main", "",
			401, "RepoNotFound", "Repository not found"},
		{"missing repository, with a token", "GET", "/api/models/acme/nothing", "hf_plain",
			404, "RepoNotFound", "Repository not found"},
		{"private repository, token not granted", "GET", "/api/models/acme/secret", "hf_plain",
			404, "RepoNotFound", "Repository not found"},
		{"bad token on a public repository", "GET", "/api/models/acme/open", "hf_unknown",
			401, "", "Invalid credentials in Authorization header"},
		{"disabled repository", "GET", "/api/models/acme/gone", "",
			403, "", "Access to this resource is disabled."},
		{"unescaped revision with a slash", "GET", "/api/models/acme/open/revision/refs/pr/1", "",
			404, "", "Sorry, we can't find the page you are looking for."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := mustDo(t, noFollow, tc.method, s.URL()+tc.path, tc.token, "")
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if got := resp.Header.Get("X-Error-Code"); got != tc.code {
				t.Errorf("X-Error-Code %q, want %q", got, tc.code)
			}
			if got := resp.Header.Get("X-Error-Message"); got != tc.message {
				t.Errorf("X-Error-Message %q, want %q", got, tc.message)
			}
			if tc.method == "HEAD" {
				return
			}
			var e struct{ Error string }
			if err := json.Unmarshal(body, &e); err != nil || e.Error != tc.message {
				t.Errorf("body %s, want {\"error\": %q}", body, tc.message)
			}
		})
	}

	t.Run("granted token reads what others cannot", func(t *testing.T) {
		for _, p := range []string{"/api/models/acme/secret", "/acme/gated/resolve/main/model.gguf"} {
			resp, body := mustDo(t, noFollow, "GET", s.URL()+p, "hf_granted", "")
			if resp.StatusCode >= 400 {
				t.Errorf("%s with a granted token: %s %s", p, resp.Status, body)
			}
		}
	})
	t.Run("gated info and tree are readable without a token", func(t *testing.T) {
		for _, p := range []string{"/api/models/acme/gated", "/api/models/acme/gated/tree/main?recursive=true"} {
			if resp, body := mustDo(t, noFollow, "GET", s.URL()+p, "", ""); resp.StatusCode != 200 {
				t.Errorf("%s: %s %s", p, resp.Status, body)
			}
		}
	})
}

type entry struct {
	Type string `json:"type"`
	Path string `json:"path"`
	Size int64  `json:"size"`
	OID  string `json:"oid"`
	LFS  *struct {
		OID  string `json:"oid"`
		Size int64  `json:"size"`
	} `json:"lfs"`
}

func TestTreePages(t *testing.T) {
	s := hubtest.New(t)
	s.AddRepo("acme/many", hubtest.RepoOptions{})
	want := map[string]string{}
	for i := range 5 {
		p := fmt.Sprintf("Q4_K_M/part-%d.gguf", i)
		c := []byte(strings.Repeat("x", i+1))
		s.AddFile("acme/many", p, c)
		want[p] = sum(c)
	}
	s.AddFileSpec("acme/many", hubtest.FileSpec{Path: "config.json", Content: []byte("{}"), InGit: true})
	s.SetPageSize(2)

	next := s.URL() + "/api/models/acme/many/tree/main?recursive=true&expand=false"
	var all []entry
	pages := 0
	for next != "" {
		resp, body := mustDo(t, noFollow, "GET", next, "", "")
		if resp.StatusCode != 200 {
			t.Fatalf("page %d: %s %s", pages, resp.Status, body)
		}
		var page []entry
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		if len(page) > 2 {
			t.Fatalf("page %d has %d entries, want at most 2", pages, len(page))
		}
		all = append(all, page...)
		pages++
		next = ""
		if l := resp.Header.Get("Link"); l != "" {
			u, rel, _ := strings.Cut(l, ">; ")
			if rel != `rel="next"` || !strings.HasPrefix(u, "<"+s.URL()+"/") || !strings.Contains(u, "cursor=") {
				t.Fatalf("Link %q is not an absolute next URL with a cursor", l)
			}
			next = strings.TrimPrefix(u, "<")
		}
	}
	// 5 files, 1 folder, 1 git file: 7 entries over 4 pages.
	if pages != 4 || len(all) != 7 {
		t.Fatalf("%d entries over %d pages, want 7 over 4: %+v", len(all), pages, all)
	}
	for _, e := range all {
		switch {
		case e.Path == "Q4_K_M":
			if e.Type != "directory" {
				t.Errorf("Q4_K_M is listed as %q, want directory", e.Type)
			}
		case e.Path == "config.json":
			if e.LFS != nil {
				t.Errorf("a file kept in git has lfs %+v", e.LFS)
			}
		default:
			if e.Type != "file" || e.LFS == nil || e.LFS.OID != want[e.Path] || e.LFS.Size != e.Size {
				t.Errorf("%s: %+v, want an LFS file with sha256 %s", e.Path, e, want[e.Path])
			}
		}
	}

	t.Run("not recursive lists the top only", func(t *testing.T) {
		_, body := mustDo(t, noFollow, "GET", s.URL()+"/api/models/acme/many/tree/main", "", "")
		var page []entry
		json.Unmarshal(body, &page)
		if len(page) != 2 || page[0].Path != "Q4_K_M" || page[1].Path != "config.json" {
			t.Errorf("got %+v, want the folder and config.json", page)
		}
	})
	t.Run("a folder's tree", func(t *testing.T) {
		s.SetPageSize(100)
		_, body := mustDo(t, noFollow, "GET", s.URL()+"/api/models/acme/many/tree/main/Q4_K_M", "", "")
		var page []entry
		json.Unmarshal(body, &page)
		if len(page) != 5 {
			t.Errorf("got %d entries, want 5", len(page))
		}
	})
	t.Run("a forged cursor is refused", func(t *testing.T) {
		resp, _ := mustDo(t, noFollow, "GET", s.URL()+"/api/models/acme/many/tree/main?recursive=true&cursor=bogus", "", "")
		if resp.StatusCode != 400 {
			t.Errorf("status %d, want 400", resp.StatusCode)
		}
	})
}

func TestModelInfoAndCommits(t *testing.T) {
	s := hubtest.New(t)
	s.AddRepo("acme/m", hubtest.RepoOptions{Gated: "auto", Branches: []string{"main", "dev"}})
	first := s.AddFile("acme/m", "a.gguf", []byte("one"))
	second := s.AddFile("acme/m", "b.gguf", []byte("two"))
	s.SetRef("acme/m", "refs/pr/1", first)
	if first == second || len(first) != 40 || s.Commit("acme/m", "main") != second {
		t.Fatalf("commits %s then %s, main at %s", first, second, s.Commit("acme/m", "main"))
	}

	info := func(path string) (sha string, gated any, siblings []map[string]any) {
		t.Helper()
		resp, body := mustDo(t, noFollow, "GET", s.URL()+path, "", "")
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %s %s", path, resp.Status, body)
		}
		var v struct {
			SHA      string
			Gated    any
			Siblings []map[string]any
		}
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatal(err)
		}
		return v.SHA, v.Gated, v.Siblings
	}

	for _, tc := range []struct {
		name, path, sha string
		files           int
	}{
		{"default branch", "/api/models/acme/m", second, 2},
		{"branch by name", "/api/models/acme/m/revision/main", second, 2},
		{"earlier commit stays readable", "/api/models/acme/m/revision/" + first, first, 1},
		{"escaped pull request ref", "/api/models/acme/m/revision/refs%2Fpr%2F1", first, 1},
		{"another branch is untouched", "/api/models/acme/m/revision/dev", s.Commit("acme/m", "dev"), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sha, gated, sib := info(tc.path)
			if sha != tc.sha || len(sib) != tc.files || gated != "auto" {
				t.Errorf("sha %s with %d files, gated %v; want %s with %d, gated auto", sha, len(sib), gated, tc.sha, tc.files)
			}
		})
	}
	t.Run("blobs adds sizes and sha256", func(t *testing.T) {
		_, _, sib := info("/api/models/acme/m?blobs=true")
		lfs, _ := sib[0]["lfs"].(map[string]any)
		if sib[0]["rfilename"] != "a.gguf" || sib[0]["size"] != 3.0 || lfs["sha256"] != sum([]byte("one")) {
			t.Errorf("sibling %v", sib[0])
		}
		_, _, sib = info("/api/models/acme/m")
		if _, ok := sib[0]["size"]; ok {
			t.Errorf("without blobs=true a sibling has a size: %v", sib[0])
		}
	})
	t.Run("not gated says false", func(t *testing.T) {
		s.AddRepo("acme/open", hubtest.RepoOptions{})
		if _, gated, _ := info("/api/models/acme/open"); gated != false {
			t.Errorf("gated %v, want false", gated)
		}
	})
}

func TestResolve(t *testing.T) {
	s := hubtest.New(t)
	s.AddRepo("acme/m", hubtest.RepoOptions{})
	content := []byte("the weights of a model")
	commit := s.AddFile("acme/m", "Q8_0/model v1.gguf", content)
	s.AddFileSpec("acme/m", hubtest.FileSpec{Path: "config.json", Content: []byte(`{"a":1}`), InGit: true})

	for _, method := range []string{"GET", "HEAD"} {
		t.Run("LFS file redirects on "+method, func(t *testing.T) {
			resp, body := mustDo(t, noFollow, method, s.URL()+"/acme/m/resolve/main/Q8_0/model%20v1.gguf", "", "")
			h := resp.Header
			if resp.StatusCode != http.StatusFound || !strings.HasPrefix(h.Get("Location"), s.CDNURL()+"/") {
				t.Fatalf("%s, Location %q: want 302 to the CDN", resp.Status, h.Get("Location"))
			}
			if h.Get("X-Repo-Commit") != s.Commit("acme/m", "main") || h.Get("X-Linked-Etag") != `"`+sum(content)+`"` ||
				h.Get("X-Linked-Size") != strconv.Itoa(len(content)) {
				t.Errorf("headers %v", h)
			}
			if cl, _ := strconv.Atoi(h.Get("Content-Length")); cl == len(content) || (method == "GET" && cl != len(body)) {
				t.Errorf("the redirect's Content-Length %d should be its own body's (%d), not the file's", cl, len(body))
			}
		})
	}
	t.Run("the CDN serves the bytes and its own ETag", func(t *testing.T) {
		resp, body := mustDo(t, http.DefaultClient, "GET", s.URL()+"/acme/m/resolve/"+commit+"/Q8_0/model%20v1.gguf", "", "")
		if resp.StatusCode != 200 || !bytes.Equal(body, content) {
			t.Fatalf("%s %q", resp.Status, body)
		}
		if strings.Contains(resp.Header.Get("ETag"), sum(content)) || resp.Header.Get("X-Repo-Commit") != "" {
			t.Errorf("the CDN answered like the Hub: %v", resp.Header)
		}
	})
	t.Run("a file kept in git comes from the Hub", func(t *testing.T) {
		resp, body := mustDo(t, noFollow, "GET", s.URL()+"/acme/m/resolve/main/config.json", "", "")
		if resp.StatusCode != 200 || string(body) != `{"a":1}` || resp.Header.Get("X-Repo-Commit") == "" {
			t.Errorf("%s %q %v", resp.Status, body, resp.Header)
		}
		if s.BytesServed("acme/m", "config.json") != 7 {
			t.Errorf("served %d bytes of config.json, want 7", s.BytesServed("acme/m", "config.json"))
		}
	})
	t.Run("a tampered CDN URL is refused", func(t *testing.T) {
		loc := mustCDNURL(t, s, "acme/m", "main", "Q8_0/model%20v1.gguf")
		resp, _ := mustDo(t, noFollow, "GET", strings.Replace(loc, "Signature=", "Signature=0", 1), "", "")
		if resp.StatusCode != 403 {
			t.Errorf("status %d, want 403", resp.StatusCode)
		}
	})
	t.Run("a deleted file is gone from main only", func(t *testing.T) {
		s.DeleteFile("acme/m", "Q8_0/model v1.gguf")
		if resp, _ := mustDo(t, noFollow, "HEAD", s.URL()+"/acme/m/resolve/main/Q8_0/model%20v1.gguf", "", ""); resp.StatusCode != 404 {
			t.Errorf("main: %s, want 404", resp.Status)
		}
		if resp, _ := mustDo(t, noFollow, "HEAD", s.URL()+"/acme/m/resolve/"+commit+"/Q8_0/model%20v1.gguf", "", ""); resp.StatusCode != 302 {
			t.Errorf("the earlier commit: %s, want 302", resp.Status)
		}
	})
}

func TestCDNRanges(t *testing.T) {
	s := hubtest.New(t)
	s.AddRepo("acme/m", hubtest.RepoOptions{})
	content := []byte("0123456789abcdefghij") // 20 bytes
	s.AddFile("acme/m", "m.gguf", content)
	loc := mustCDNURL(t, s, "acme/m", "main", "m.gguf")

	for _, tc := range []struct {
		name, method, rng string
		status            int
		contentRange      string
		body              string
	}{
		{"no range", "GET", "", 200, "", string(content)},
		{"closed range", "GET", "bytes=10-14", 206, "bytes 10-14/20", "abcde"},
		{"open range", "GET", "bytes=15-", 206, "bytes 15-19/20", "fghij"},
		{"range past the end is cut to it", "GET", "bytes=18-100", 206, "bytes 18-19/20", "ij"},
		{"last bytes", "GET", "bytes=-3", 206, "bytes 17-19/20", "hij"},
		{"start at the end", "GET", "bytes=20-", 416, "bytes */20", ""},
		{"unreadable range is ignored", "GET", "pages=1-2", 200, "", string(content)},
		{"head with a range", "HEAD", "bytes=5-", 206, "bytes 5-19/20", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := mustDo(t, noFollow, tc.method, loc, "", tc.rng)
			if resp.StatusCode != tc.status || resp.Header.Get("Content-Range") != tc.contentRange {
				t.Fatalf("%s, Content-Range %q; want %d, %q", resp.Status, resp.Header.Get("Content-Range"), tc.status, tc.contentRange)
			}
			if tc.status < 300 && (string(body) != tc.body || resp.Header.Get("Accept-Ranges") != "bytes") {
				t.Errorf("body %q, Accept-Ranges %q; want %q, bytes", body, resp.Header.Get("Accept-Ranges"), tc.body)
			}
			if tc.method == "HEAD" && resp.ContentLength != 15 {
				t.Errorf("HEAD Content-Length %d, want 15", resp.ContentLength)
			}
		})
	}
}

func TestFaults(t *testing.T) {
	s := hubtest.New(t)
	s.AddRepo("acme/m", hubtest.RepoOptions{})
	const size = 100_000
	s.AddFileFunc("acme/m", "m.gguf", size, hubtest.Pattern(7))
	want := make([]byte, size)
	hubtest.Pattern(7)(0, want)
	loc := mustCDNURL(t, s, "acme/m", "main", "m.gguf")

	t.Run("ignored range answers 200 with everything", func(t *testing.T) {
		s.IgnoreRange("acme/m", "m.gguf", true)
		defer s.ClearFaults("acme/m", "m.gguf")
		resp, body := mustDo(t, noFollow, "GET", loc, "", "bytes=500-")
		if resp.StatusCode != 200 || resp.Header.Get("Content-Range") != "" || !bytes.Equal(body, want) {
			t.Errorf("%s, %d bytes; want 200 with all %d", resp.Status, len(body), size)
		}
	})
	t.Run("cut connection", func(t *testing.T) {
		s.CutNext("acme/m", "m.gguf", 40_000, 1)
		resp, err := http.Get(loc)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !errors.Is(err, io.ErrUnexpectedEOF) || len(got) != 40_000 || !bytes.Equal(got, want[:40_000]) {
			t.Fatalf("read %d bytes, err %v; want the first 40000 then an unexpected EOF", len(got), err)
		}
		// Only the next one was cut: a resume now works.
		resp2, body := mustDo(t, noFollow, "GET", loc, "", "bytes=40000-")
		if resp2.StatusCode != 206 || !bytes.Equal(body, want[40_000:]) {
			t.Errorf("resume: %s, %d bytes", resp2.Status, len(body))
		}
	})
	t.Run("flipped byte", func(t *testing.T) {
		s.FlipByte("acme/m", "m.gguf", 12_345)
		defer s.ClearFaults("acme/m", "m.gguf")
		_, body := mustDo(t, noFollow, "GET", loc, "", "")
		if sum(body) == sum(want) || body[12_345] != want[12_345]^0xFF ||
			!bytes.Equal(body[:12_345], want[:12_345]) || !bytes.Equal(body[12_346:], want[12_346:]) {
			t.Error("want exactly byte 12345 flipped")
		}
		_, part := mustDo(t, noFollow, "GET", loc, "", "bytes=12345-12345")
		if len(part) != 1 || part[0] != want[12_345]^0xFF {
			t.Error("a range over the flipped byte should carry it flipped")
		}
	})
	t.Run("500 the next two times", func(t *testing.T) {
		s.FailNext("acme/m", "m.gguf", 500, 2)
		var got []int
		for range 3 {
			resp, _ := mustDo(t, noFollow, "GET", loc, "", "bytes=0-0")
			got = append(got, resp.StatusCode)
		}
		if fmt.Sprint(got) != "[500 500 206]" {
			t.Errorf("statuses %v, want [500 500 206]", got)
		}
	})
	t.Run("429 carries Retry-After", func(t *testing.T) {
		s.SetRetryAfter(1)
		defer s.SetRetryAfter(0)
		s.FailNext("acme/m", "m.gguf", 429, 1)
		resp, _ := mustDo(t, noFollow, "HEAD", loc, "", "")
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("%s, Retry-After %q; want 429 with 1", resp.Status, resp.Header.Get("Retry-After"))
		}
	})
	t.Run("repository faults hit the Hub's routes", func(t *testing.T) {
		s.FailNext("acme/m", "", 503, 1)
		if resp, _ := mustDo(t, noFollow, "GET", s.URL()+"/api/models/acme/m", "", ""); resp.StatusCode != 503 {
			t.Errorf("model info %s, want 503", resp.Status)
		}
		if resp, _ := mustDo(t, noFollow, "GET", s.URL()+"/api/models/acme/m", "", ""); resp.StatusCode != 200 {
			t.Errorf("then %s, want 200", resp.Status)
		}
	})
	t.Run("trickle", func(t *testing.T) {
		s.Trickle("acme/m", "m.gguf", 20_000)
		defer s.ClearFaults("acme/m", "m.gguf")
		start := time.Now()
		_, body := mustDo(t, noFollow, "GET", loc, "", "bytes=0-5999")
		if took := time.Since(start); took < 250*time.Millisecond || len(body) != 6000 {
			t.Errorf("6000 bytes at 20000/s took %s (%d bytes), want about 300ms", took, len(body))
		}
	})
}

func TestCounters(t *testing.T) {
	s := hubtest.New(t)
	s.AddRepo("acme/m", hubtest.RepoOptions{})
	s.AddFile("acme/m", "m.gguf", make([]byte, 1000))
	loc := mustCDNURL(t, s, "acme/m", "main", "m.gguf")
	mustDo(t, noFollow, "GET", loc, "", "bytes=100-")
	mustDo(t, noFollow, "HEAD", loc, "", "")
	if s.BytesServed("acme/m", "m.gguf") != 900 || s.Requests("acme/m", "m.gguf") != 1 || s.CDNSawAuthorization() {
		t.Errorf("served %d bytes in %d GETs, CDN saw a token %v; want 900 in 1, false",
			s.BytesServed("acme/m", "m.gguf"), s.Requests("acme/m", "m.gguf"), s.CDNSawAuthorization())
	}
	mustDo(t, noFollow, "GET", loc, "hf_leaked", "bytes=0-0")
	if !s.CDNSawAuthorization() {
		t.Error("a token sent to the CDN went unnoticed")
	}
	log := s.Log()
	if last := log[len(log)-1]; last.Server != "cdn" || last.Authorization != "Bearer hf_leaked" || last.Status != 206 {
		t.Errorf("last logged request %+v", last)
	}
	s.ResetCounters()
	if s.BytesServed("acme/m", "m.gguf") != 0 || s.Requests("acme/m", "m.gguf") != 0 || s.CDNSawAuthorization() || len(s.Log()) != 0 {
		t.Error("ResetCounters left something behind")
	}
}

func TestGeneratedFile(t *testing.T) {
	s := hubtest.New(t)
	s.AddRepo("acme/big", hubtest.RepoOptions{})
	const size = 3<<20 + 17
	whole := make([]byte, size)
	hubtest.Pattern(1)(0, whole)
	s.AddFileFunc("acme/big", "big.gguf", size, hubtest.Pattern(1))
	// A caller that knows the sha256 saves the hashing; it is published as given.
	s.AddFileSpec("acme/big", hubtest.FileSpec{Path: "huge.gguf", Size: 5 << 30, Gen: hubtest.Pattern(2), SHA256: strings.Repeat("ab", 32)})

	_, body := mustDo(t, noFollow, "GET", s.URL()+"/api/models/acme/big/tree/main?recursive=true", "", "")
	var page []entry
	json.Unmarshal(body, &page)
	if len(page) != 2 || page[0].LFS.OID != sum(whole) || page[1].Size != 5<<30 || page[1].LFS.OID != strings.Repeat("ab", 32) {
		t.Fatalf("tree %s", body)
	}
	_, tail := mustDo(t, noFollow, "GET", mustCDNURL(t, s, "acme/big", "main", "big.gguf"), "", "bytes=3145700-")
	if !bytes.Equal(tail, whole[3145700:]) {
		t.Error("the tail of a generated file differs from the generator's bytes")
	}
	_, end := mustDo(t, noFollow, "GET", mustCDNURL(t, s, "acme/big", "main", "huge.gguf"), "", "bytes=-4")
	want := make([]byte, 4)
	hubtest.Pattern(2)(5<<30-4, want)
	if !bytes.Equal(end, want) {
		t.Errorf("the last bytes of a 5 GB file: %x, want %x", end, want)
	}
	if hubtest.Pattern(1)(0, want); bytes.Equal(want, whole[:4]) == false {
		t.Error("Pattern is not deterministic")
	}
}

// TestPatternAnyCut reads the generator at every offset and length that cut
// its 8-byte words differently: each piece must be that part of the whole,
// as a resume from any byte would ask for it.
func TestPatternAnyCut(t *testing.T) {
	gen := hubtest.Pattern(9)
	whole := make([]byte, 256)
	gen(0, whole)
	for off := range 40 {
		for n := range 90 {
			got := make([]byte, n)
			gen(int64(off), got)
			if !bytes.Equal(got, whole[off:off+n]) {
				t.Fatalf("%d bytes from %d: %x, want %x", n, off, got, whole[off:off+n])
			}
		}
	}
	// Neighbouring words differ, and so do seeds: no period hides a wrong offset.
	for i := 8; i < len(whole); i += 8 {
		if bytes.Equal(whole[i:i+8], whole[i-8:i]) {
			t.Fatalf("the words at %d and %d are the same", i-8, i)
		}
	}
	other := make([]byte, len(whole))
	hubtest.Pattern(10)(0, other)
	if bytes.Equal(other[:8], whole[:8]) {
		t.Error("two seeds gave the same first word")
	}
}

// TestConcurrentUse downloads while faults change, for the race detector.
func TestConcurrentUse(t *testing.T) {
	s := hubtest.New(t)
	s.AddRepo("acme/m", hubtest.RepoOptions{})
	s.AddFileFunc("acme/m", "m.gguf", 200_000, hubtest.Pattern(3))
	loc := mustCDNURL(t, s, "acme/m", "main", "m.gguf")
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 5 {
				resp, err := http.Get(loc)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				s.AddFile("acme/m", fmt.Sprintf("extra-%d-%d", i, j), []byte("x"))
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			s.FlipByte("acme/m", "m.gguf", 10)
			s.CutNext("acme/m", "m.gguf", 100, 1)
			s.IgnoreRange("acme/m", "m.gguf", true)
			s.ClearFaults("acme/m", "m.gguf")
			_ = s.BytesServed("acme/m", "m.gguf")
		}
	})
	wg.Wait()
	if s.Requests("acme/m", "m.gguf") != 20 {
		t.Errorf("%d GETs counted, want 20", s.Requests("acme/m", "m.gguf"))
	}
}

func TestCloseEndsSlowDownloads(t *testing.T) {
	s := hubtest.New(t)
	s.AddRepo("acme/m", hubtest.RepoOptions{})
	s.AddFileFunc("acme/m", "m.gguf", 1<<20, hubtest.Pattern(4))
	s.Trickle("acme/m", "m.gguf", 1000) // about 17 minutes for the whole file
	loc := mustCDNURL(t, s, "acme/m", "main", "m.gguf")
	began := time.Now()
	resp, err := http.Get(loc)
	if err != nil {
		t.Fatal(err)
	}
	// The first bytes of a trickle arrive at once, not when a buffer fills.
	if _, err := io.ReadFull(resp.Body, make([]byte, 10)); err != nil || time.Since(began) > time.Second {
		t.Fatalf("the first 10 bytes took %s (err %v)", time.Since(began), err)
	}
	defer resp.Body.Close()
	start := time.Now()
	s.Close()
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Close took %s with a slow download running", took)
	}
}

// TestRefs lists branches and tags as the Hub does, each with its commit,
// and pull requests' refs only when asked; the refs of a repository the
// caller may not see are refused as its info is.
func TestRefs(t *testing.T) {
	s := hubtest.New(t)
	s.AddRepo("acme/m", hubtest.RepoOptions{Gated: "manual", Branches: []string{"main", "dev"}})
	first := s.AddFile("acme/m", "a.gguf", []byte("one"))
	second := s.AddFile("acme/m", "a.gguf", []byte("two"))
	s.SetRef("acme/m", "v1.0", first)
	s.SetRef("acme/m", "refs/pr/1", second)

	type ref struct{ Name, Ref, TargetCommit string }
	var got struct {
		Branches, Converts, Tags []ref
		PullRequests             *[]ref
	}
	resp, body := mustDo(t, noFollow, "GET", s.URL()+"/api/models/acme/m/refs", "", "")
	if resp.StatusCode != 200 {
		t.Fatalf("refs of a gated repository without a token: %s %s", resp.Status, body)
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	want := []ref{{"main", "refs/heads/main", second}, {"dev", "refs/heads/dev", s.Commit("acme/m", "dev")}}
	if fmt.Sprint(got.Branches) != fmt.Sprint(want) {
		t.Errorf("branches %v, want %v", got.Branches, want)
	}
	if len(got.Tags) != 1 || got.Tags[0] != (ref{"v1.0", "refs/tags/v1.0", first}) {
		t.Errorf("tags %v, want v1.0 at %s", got.Tags, first)
	}
	if got.Converts == nil || len(got.Converts) != 0 || got.PullRequests != nil {
		t.Errorf("converts %v and pull requests %v, want an empty list and none (not asked for)", got.Converts, got.PullRequests)
	}

	_, body = mustDo(t, noFollow, "GET", s.URL()+"/api/models/acme/m/refs?include_prs=1", "", "")
	got.PullRequests = nil
	if err := json.Unmarshal(body, &got); err != nil || got.PullRequests == nil || len(*got.PullRequests) != 1 ||
		(*got.PullRequests)[0].TargetCommit != second {
		t.Errorf("with include_prs=1: %s", body)
	}

	// A branch moved by SetRef is listed where it now points.
	s.SetRef("acme/m", "dev", second)
	_, body = mustDo(t, noFollow, "GET", s.URL()+"/api/models/acme/m/refs", "", "")
	if !strings.Contains(string(body), `{"name":"dev","ref":"refs/heads/dev","targetCommit":"`+second+`"}`) {
		t.Errorf("after moving dev: %s", body)
	}

	resp, _ = mustDo(t, noFollow, "GET", s.URL()+"/api/models/acme/nothing/refs", "", "")
	if resp.StatusCode != 401 || resp.Header.Get("X-Error-Code") != "RepoNotFound" {
		t.Errorf("refs of a missing repository, anonymous: %s %q", resp.Status, resp.Header.Get("X-Error-Code"))
	}
}

func TestCDNManners(t *testing.T) {
	s := hubtest.New(t)
	s.AddRepo("acme/m", hubtest.RepoOptions{})
	s.AddFile("acme/m", "m.gguf", make([]byte, 100_000))
	loc := mustCDNURL(t, s, "acme/m", "main", "m.gguf")
	get := func(ctx context.Context, rg string) (int, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", loc, nil)
		req.Header.Set("Range", rg)
		resp, err := noFollow.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return len(b), err
	}

	t.Run("throttle slows every connection while too many run", func(t *testing.T) {
		s.ConnRate(20_000)
		s.Throttle(1, 10)
		defer s.ConnRate(0)
		defer s.Throttle(0, 1)
		start := time.Now()
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { get(context.Background(), "bytes=0-1999") })
		}
		wg.Wait()
		// Alone, 2000 bytes at 20000/s take 100ms; two at once are each
		// held to 2000/s.
		if took := time.Since(start); took < 500*time.Millisecond {
			t.Errorf("two throttled connections took %s for 2000 bytes each, want about 1s", took)
		}
		if _, most := s.Connections(); most != 2 {
			t.Errorf("at most %d connections at once, want 2", most)
		}
		if s.Throttled() == 0 {
			t.Error("the time above the throttle's count was not recorded")
		}
	})
	t.Run("a stalled response sends nothing more until the client leaves", func(t *testing.T) {
		s.StallNext("acme/m", "m.gguf", 300, 1)
		defer s.ClearFaults("acme/m", "m.gguf")
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		n, err := get(ctx, "bytes=0-999")
		if n != 300 || err == nil {
			t.Errorf("read %d bytes, err %v; want 300 and the client's deadline", n, err)
		}
		if n, err := get(context.Background(), "bytes=0-999"); n != 1000 || err != nil {
			t.Errorf("the next response sent %d bytes, err %v; want 1000", n, err)
		}
	})
}

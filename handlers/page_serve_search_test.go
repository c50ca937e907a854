package handlers_test

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"modelserve/handlers"
	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
	"modelserve/internal/operr"
	"modelserve/internal/words"
)

// newSearchEnv is a console whose search asks a hubtest Hub holding two
// qwen GGUF repositories (one gated) and a models directory with a qwen
// folder.
func newSearchEnv(t *testing.T) (*consoleEnv, *hubtest.Server) {
	t.Helper()
	hub := hubtest.New(t)
	hub.AddRepo("acme/Qwen-GGUF", hubtest.RepoOptions{Downloads: 1200, Likes: 1})
	hub.AddFile("acme/Qwen-GGUF", "qwen-q4_k_m.gguf", []byte("x"))
	hub.AddRepo("meta/qwen-gated-GGUF", hubtest.RepoOptions{Gated: "manual", Downloads: 3, Likes: 2})
	hub.AddFile("meta/qwen-gated-GGUF", "q8_0.gguf", []byte("x"))
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "my-qwen"), 0o755); err != nil {
		t.Fatal(err)
	}
	client, err := hf.NewClient(hf.Options{Endpoint: hub.URL(), Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e := newConsoleEnv(t, func(d *handlers.Deps) {
		d.Finder = hf.Registries{Hub: client, Local: hf.NewLocal(root, "")}
	})
	return e, hub
}

func TestServeSearchListsWhatTheRegistriesHold(t *testing.T) {
	e, _ := newSearchEnv(t)
	b := e.signedIn()
	for _, tc := range []struct {
		name string
		resp func() *http.Response
	}{
		{"htmx fragment", func() *http.Response { return b.get("/serve/search?q=qwen", htmx...) }},
		{"page without JavaScript", func() *http.Response { return b.get("/serve?q=qwen") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := tc.resp()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %s", resp.Status)
			}
			doc := mustDoc(t, resp)
			rows := doc.Find(`[data-testid="search-result"]`)
			var ids []string
			rows.Each(func(_ int, s *goquery.Selection) { ids = append(ids, s.AttrOr("data-repo", "")) })
			if got := strings.Join(ids, " "); got != "local/my-qwen acme/Qwen-GGUF meta/qwen-gated-GGUF" {
				t.Fatalf("results %q", got)
			}
			first := rows.Eq(1)
			if got := strings.Join(strings.Fields(first.Find(`[data-testid="search-figures"]`).Text()), " "); got != "1200 downloads · 1 like" {
				t.Errorf("figures %q", got)
			}
			if href := first.Find(`a[data-testid="search-choose"]`).AttrOr("href", ""); href != "/serve?repo="+url.QueryEscape("acme/Qwen-GGUF") {
				t.Errorf("choosing goes to %q", href)
			}
			// The gated mark is words, not only an icon or a colour.
			if got := rows.Eq(2).Find(`[data-testid="search-gated"]`).Text(); !strings.Contains(got, "gated: manual") {
				t.Errorf("gated mark %q", got)
			}
			if n := rows.Eq(1).Find(`[data-testid="search-gated"]`).Length(); n != 0 {
				t.Errorf("an open repository is marked gated")
			}
		})
	}
	// The search form is a GET without the session's token: it would land
	// in the address bar and the logs.
	form := mustDoc(t, b.get("/serve")).Find(`form[data-testid="search-form"]`)
	if form.AttrOr("method", "") != "get" || form.Find(`[name="csrf"]`).Length() != 0 {
		t.Fatalf("search form: method %q, csrf fields %d", form.AttrOr("method", ""), form.Find(`[name="csrf"]`).Length())
	}
	if form.Find(`input[name="q"][hx-get="/serve/search"]`).Length() != 1 || form.Find("label").Length() == 0 {
		t.Fatal("the search field has no htmx lookup or no label")
	}
}

func TestServeSearchRefusesALongQuery(t *testing.T) {
	e, hub := newSearchEnv(t)
	b := e.signedIn()
	long := strings.Repeat("x", 201)
	doc := mustDoc(t, b.get("/serve/search?q="+long, htmx...))
	alert := doc.Find(`[data-testid="alert"]`).Text()
	if !strings.Contains(alert, operr.Quote(long)) || strings.Count(alert, "x") > words.ClipMost+1 {
		t.Fatalf("a 201-character query: %q", alert)
	}
	if n := len(hub.Log()); n != 0 {
		t.Fatalf("a refused query reached the Hub %d times", n)
	}
}

func TestServeSearchSaysWhenNothingMatches(t *testing.T) {
	e, hub := newSearchEnv(t)
	b := e.signedIn()
	if got := mustDoc(t, b.get("/serve/search?q=mistral", htmx...)).Find(`[data-testid="search-none"]`).Text(); !strings.Contains(got, "mistral") {
		t.Fatalf("no match says %q", got)
	}
	// A Hub that keeps failing is a sentence, with the local folders still listed.
	hub.FailNext(hubtest.SearchRoute, "", http.StatusServiceUnavailable, 10)
	doc := mustDoc(t, b.get("/serve/search?q=qwen", htmx...))
	if got := doc.Find(`[data-testid="alert"]`).Text(); !strings.Contains(got, "try again later") {
		t.Errorf("a failing Hub says %q", got)
	}
	if got := doc.Find(`[data-testid="search-result"]`).AttrOr("data-repo", ""); got != "local/my-qwen" {
		t.Errorf("the local folder is not listed beside the failure: %q", got)
	}
}

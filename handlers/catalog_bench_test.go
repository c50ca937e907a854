package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"modelserve/handlers"
	"modelserve/internal/auth"
	"modelserve/internal/testkit"
)

// mustCatalogOf adds n models to e's catalog, named as benchFleet names
// its models (model-000, model-001, ...), in one go.
func mustCatalogOf(t testing.TB, e *consoleEnv, n int) {
	t.Helper()
	for i := range n {
		mustAdd(t, e, fmt.Sprintf("model-%03d", i))
	}
}

// BenchmarkCatalogAt500 is the time to the first byte of GET
// /api/v1/catalog, GET /api/v1/replicas and the catalog page with 500
// models in a real SQLite catalog and a fleet running four replicas of
// each, through the real mux over loopback HTTP, each beside the same at
// 20 models (x-of-20). The target is under 20 ms for the catalog's answer
// and its page.
func BenchmarkCatalogAt500(b *testing.B) {
	at20 := map[string]float64{}
	for _, n := range []int{20, 500} {
		f, pool := benchFleet(b, 4*n)
		e := newConsoleEnv(b, func(d *handlers.Deps) { d.Fleet, d.Pool = f, pool })
		mustCatalogOf(b, e, n)
		tok, err := auth.NewTokens(e.db).Create(context.Background(), "bench")
		if err != nil {
			b.Fatal(err)
		}
		br := e.signedIn()
		for _, c := range []struct {
			name, path string
			api, goal  bool
		}{
			{"api-catalog", "/api/v1/catalog", true, true},
			{"api-replicas", "/api/v1/replicas", true, false},
			{"catalog-page", "/catalog", false, true},
		} {
			b.Run(fmt.Sprintf("%s/n=%d", c.name, n), func(b *testing.B) {
				ms := testkit.MsToFirstByte(b, func() *http.Response {
					if !c.api {
						return br.get(c.path)
					}
					return testkit.BearerGet(b, e.srv.URL+c.path, tok)
				})
				if n == 20 {
					at20[c.name] = ms
					return
				}
				if base := at20[c.name]; base > 0 {
					b.ReportMetric(ms/base, "x-of-20")
				}
				if c.goal && ms > 20 {
					b.Errorf("%s took %.1f ms to its first byte with %d models; the target is under 20 ms", c.path, ms, n)
				}
			})
		}
	}
}

// TestCatalogPageWindows: with 60 models the catalog page shows 25 at a
// time and says which, with a link to the next 25; following the links
// shows every model once, the last window without a next, and the page's
// stream draws the window the page shows.
func TestCatalogPageWindows(t *testing.T) {
	e := newConsoleEnv(t)
	mustCatalogOf(t, e, 60)
	b := e.signedIn()
	seen := map[string]int{}
	path := "/catalog"
	for _, want := range []struct {
		rows   int
		window string
		stream string
	}{
		{25, "Showing models 1 to 25 of 60.", "/catalog/stream"},
		{25, "Showing models 26 to 50 of 60.", "/catalog/stream?after=model-024"},
		{10, "Showing models 51 to 60 of 60.", "/catalog/stream?after=model-049"},
	} {
		doc := mustStatus(t, b.get(path), http.StatusOK)
		rows := doc.Find(`[data-testid="model-row"]`)
		if rows.Length() != want.rows {
			t.Errorf("%s shows %d models, want %d", path, rows.Length(), want.rows)
		}
		rows.Each(func(_ int, r *goquery.Selection) { seen[r.AttrOr("data-model", "")]++ })
		if got := strings.Join(strings.Fields(doc.Find(`[data-testid="catalog-window"]`).Text()), " "); !strings.HasPrefix(got, want.window) {
			t.Errorf("%s says %q, want %q", path, got, want.window)
		}
		if doc.Find(`[sse-connect="`+want.stream+`"]`).Length() != 1 {
			t.Errorf("%s does not follow %s", path, want.stream)
		}
		if path != "/catalog" && doc.Find(`[data-testid="catalog-first"]`).AttrOr("href", "") != "/catalog" {
			t.Errorf("%s has no link to the first page", path)
		}
		path = doc.Find(`[data-testid="catalog-next"]`).AttrOr("href", "")
	}
	if path != "" {
		t.Errorf("the last window links to a next one, %s", path)
	}
	if len(seen) != 60 {
		t.Errorf("the windows showed %d models, want all 60", len(seen))
	}
	for name, n := range seen {
		if n != 1 {
			t.Errorf("%s was shown %d times", name, n)
		}
	}

	// A model just checked is shown wherever it is, its window followed.
	doc := mustStatus(t, b.get("/catalog?checked=model-040"), http.StatusOK)
	if got := doc.Find(`[data-testid="model-row"]`).First().AttrOr("data-model", ""); got != "model-040" {
		t.Errorf("the page after checking model-040 begins with %q", got)
	}
	if doc.Find(`[sse-connect="/catalog/stream?after=model-039"]`).Length() != 1 {
		t.Error("the page after checking model-040 does not follow its window")
	}

	// A model the first window does not show is still not said removed.
	if got := mustStatus(t, b.get("/catalog?removed=model-059"), http.StatusOK).Find(`[data-testid="notice"]`).Text(); got != "" {
		t.Errorf("the first window says %q of a model the catalog has", got)
	}

	resp := b.get("/catalog/stream?after=model-049")
	defer resp.Body.Close()
	first := nextEvent(t, readEvents(t, resp.Body))
	doc, _ = goquery.NewDocumentFromReader(strings.NewReader(first.data))
	if got := doc.Find(`[data-testid="model-row"]`); got.Length() != 10 || got.First().AttrOr("data-model", "") != "model-050" {
		t.Errorf("the stream of the last window draws %d models from %s, want 10 from model-050", got.Length(), got.First().AttrOr("data-model", ""))
	}
}

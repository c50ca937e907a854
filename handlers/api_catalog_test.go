package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// catalogPage is a page of GET /api/v1/catalog as a client reads it.
type catalogPage struct {
	Models []struct {
		Name string `json:"name"`
	} `json:"models"`
	Limit int     `json:"limit"`
	Next  *string `json:"next"`
}

// TestAPICatalogPages: following next from the first page reads every
// model exactly once, in name order, each page at most its limit, and the
// last page has no next; a model added between pages is not skipped nor
// read twice.
func TestAPICatalogPages(t *testing.T) {
	e := newConsoleEnv(t)
	// Added out of order: the pages are by name, not by when.
	var want []string
	for _, i := range []int{6, 2, 9, 0, 4, 7, 1} {
		name := fmt.Sprintf("model-%03d", i)
		mustAdd(t, e, name)
		want = append(want, name)
	}
	slices.Sort(want)
	c := newAPIClient(t, e)
	var got []string
	path, pages := "/api/v1/catalog?limit=3", 0
	for path != "" {
		if pages++; pages > 10 {
			t.Fatalf("still paging after 10 pages: %v", got)
		}
		p := getCatalogPage(t, c, path)
		if len(p.Models) > 3 || p.Limit != 3 {
			t.Fatalf("%s: %d models, limit %d; want at most 3, limit 3", path, len(p.Models), p.Limit)
		}
		for _, m := range p.Models {
			got = append(got, m.Name)
		}
		if pages == 1 {
			// Added after the first page was read, ahead of its cursor:
			// a later page has it, once.
			mustAdd(t, e, "model-005")
			want = append(want, "model-005")
			slices.Sort(want)
		}
		path = ""
		if p.Next != nil {
			path = *p.Next
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("the pages read %v, want %v", got, want)
	}
	if pages != 3 {
		t.Errorf("8 models at 3 a page took %d pages, want 3 (the last without next)", pages)
	}

	// A model removed since the page before ended still pages on.
	if err := e.catalog.Remove(context.Background(), "model-002"); err != nil {
		t.Fatal(err)
	}
	p := getCatalogPage(t, c, "/api/v1/catalog?after=model-002&limit=2")
	if len(p.Models) != 2 || p.Models[0].Name != "model-004" || p.Next == nil {
		t.Errorf("after a removed model: %+v, want model-004 and model-005 with next", p)
	}
}

// TestAPICatalogDefaultPage: without a limit a page holds 100 models, and
// says where the rest are.
func TestAPICatalogDefaultPage(t *testing.T) {
	e := newConsoleEnv(t)
	for i := range 101 {
		mustAdd(t, e, fmt.Sprintf("model-%03d", i))
	}
	c := newAPIClient(t, e)
	p := getCatalogPage(t, c, "/api/v1/catalog")
	if len(p.Models) != 100 || p.Next == nil || *p.Next != "/api/v1/catalog?after=model-099&limit=100" {
		t.Fatalf("the first page has %d models and next %v, want 100 and the page after model-099", len(p.Models), p.Next)
	}
	if last := getCatalogPage(t, c, *p.Next); len(last.Models) != 1 || last.Models[0].Name != "model-100" || last.Next != nil {
		t.Errorf("the last page: %+v, want model-100 alone and no next", last)
	}
}

// TestAPICatalogBadPage: a limit or a cursor no page could have is 400
// with the sentence of what it takes, from the catalog and the replicas.
func TestAPICatalogBadPage(t *testing.T) {
	e := newConsoleEnv(t)
	c := newAPIClient(t, e)
	for _, tt := range []struct{ name, query, says string }{
		{"limit zero", "limit=0", "limit is a whole number from 1 to 500"},
		{"limit too big", "limit=501", "limit is a whole number from 1 to 500"},
		{"limit not a number", "limit=ten", "limit is a whole number from 1 to 500"},
		{"after upper case", "after=Model-1", "after is a model's name"},
		{"after empty", "after=", "after is a model's name"},
		{"offset", "offset=100", "paged by after"},
	} {
		// The replicas are paged as the catalog is, in the same words.
		for _, path := range []string{"/api/v1/catalog", "/api/v1/replicas"} {
			t.Run(tt.name+" "+path, func(t *testing.T) {
				resp, body := c.do(http.MethodGet, path+"?"+tt.query, nil)
				if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), tt.says) {
					t.Errorf("%s?%s: %s %s, want 400 saying %q", path, tt.query, resp.Status, body, tt.says)
				}
			})
		}
	}
}

func mustAdd(t testing.TB, e *consoleEnv, name string) {
	t.Helper()
	if err := e.catalog.Add(context.Background(), tinyModel(name), "test"); err != nil {
		t.Fatal(err)
	}
}

func getCatalogPage(t *testing.T, c *apiClient, path string) catalogPage {
	t.Helper()
	resp, body := c.do(http.MethodGet, path, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", path, resp.Status, body)
	}
	var p catalogPage
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

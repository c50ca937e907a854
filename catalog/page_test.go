package catalog_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"modelserve/catalog"
	"modelserve/internal/testkit"
)

// mustAddMany adds n models named model-0000 on, each with two aliases,
// and returns their names in order.
func mustAddMany(t testing.TB, s *catalog.Store, n int) []string {
	t.Helper()
	names := make([]string, n)
	for i := range n {
		m := validModel(fmt.Sprintf("model-%04d", i))
		m.Aliases = []string{m.Name + "-a", m.Name + "-b"}
		if err := s.Add(context.Background(), m, "tester"); err != nil {
			t.Fatalf("Add(%s): %v", m.Name, err)
		}
		names[i] = m.Name
	}
	return names
}

func pageNames(p catalog.Page) []string {
	var out []string
	for _, m := range p.Models {
		out = append(out, m.Name)
	}
	return out
}

// TestPageWalksTheCatalog: pages followed by their last name give every
// model once, in order, with its aliases, each saying where it stands;
// a page held at a model beyond the first window begins at it.
func TestPageWalksTheCatalog(t *testing.T) {
	ctx := context.Background()
	s, _ := MustOpen(t)
	names := mustAddMany(t, s, 60)

	var seen []string
	after := ""
	for range 10 {
		p, err := s.Page(ctx, catalog.PageQuery{After: after, Limit: 25})
		if err != nil {
			t.Fatal(err)
		}
		if p.Total != 60 || p.Before != len(seen) || p.After != after {
			t.Errorf("the page after %q says total %d, before %d, after %q; want 60, %d, %q", after, p.Total, p.Before, p.After, len(seen), after)
		}
		for _, m := range p.Models {
			if want := []string{m.Name + "-a", m.Name + "-b"}; !reflect.DeepEqual(m.Aliases, want) {
				t.Errorf("%s has the aliases %v on its page, want %v", m.Name, m.Aliases, want)
			}
		}
		seen = append(seen, pageNames(p)...)
		if !p.More {
			break
		}
		after = p.Models[len(p.Models)-1].Name
	}
	if !reflect.DeepEqual(seen, names) {
		t.Errorf("the pages gave %d models %v…; want the 60 in order", len(seen), seen[:min(5, len(seen))])
	}

	// A name the catalog does not have pages from where it would be.
	p, err := s.Page(ctx, catalog.PageQuery{After: "model-0009x", Limit: 2})
	if err != nil || !reflect.DeepEqual(pageNames(p), []string{"model-0010", "model-0011"}) || p.Before != 10 {
		t.Errorf("the page after a removed name: %v (before %d), %v; want model-0010, model-0011 with 10 before", pageNames(p), p.Before, err)
	}

	// Held at model-0040: the window begins at it, after model-0039.
	p, err = s.Page(ctx, catalog.PageQuery{Limit: 25, Holding: "model-0040"})
	if err != nil || p.After != "model-0039" || p.Before != 40 || p.Models[0].Name != "model-0040" || len(p.Models) != 20 || p.More {
		t.Errorf("held at model-0040: after %q, before %d, first %v, more %v, %v; want it first of the last 20, after model-0039",
			p.After, p.Before, pageNames(p)[:1], p.More, err)
	}
	// Held at one in the first window, or at none the catalog has: the
	// first window.
	for _, held := range []string{"model-0003", "model-9999"} {
		p, err = s.Page(ctx, catalog.PageQuery{Limit: 25, Holding: held})
		if err != nil || p.After != "" || p.Before != 0 || p.Models[0].Name != "model-0000" {
			t.Errorf("held at %s: after %q, before %d, %v; want the first window", held, p.After, p.Before, err)
		}
	}
}

// TestPageReadsOnlyItsRows: at 500 models a page of 25 decodes its own
// rows and no other: a model beyond the page whose stored entry cannot
// be read fails the whole list, and not the page.
func TestPageReadsOnlyItsRows(t *testing.T) {
	ctx := context.Background()
	s, db := MustOpen(t)
	mustAddMany(t, s, 500)
	if _, err := db.Exec(`UPDATE models SET spec = 'not an entry' WHERE name IN ('model-0000', 'model-0450')`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(ctx); err == nil {
		t.Fatal("List read a catalog with two unreadable entries; the test cannot tell what a page reads")
	}
	p, err := s.Page(ctx, catalog.PageQuery{After: "model-0200", Limit: 25})
	if err != nil {
		t.Fatalf("a page of 25 at 500 models read beyond its rows: %v", err)
	}
	if got := pageNames(p); len(got) != 25 || got[0] != "model-0201" || got[24] != "model-0225" || p.Total != 500 || p.Before != 201 {
		t.Errorf("the page after model-0200: %d models from %v, total %d, before %d; want 25 from model-0201, 500, 201", len(got), got[:1], p.Total, p.Before)
	}
}

// BenchmarkCatalogPage reads a page of 25 in the middle of a catalog of
// 50 and of 500 models: the page's cost stays that of its own rows.
func BenchmarkCatalogPage(b *testing.B) {
	for _, n := range []int{50, 500} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s := catalog.NewStore(testkit.OpenDB(b))
			names := mustAddMany(b, s, n)
			q := catalog.PageQuery{After: names[n/2-1], Limit: 25}
			for b.Loop() {
				if _, err := s.Page(context.Background(), q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

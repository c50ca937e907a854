package catalogtest

import (
	"context"
	"testing"

	"modelserve/catalog"
)

// TestPutReplacesByName: a model put again is one model, with the
// settings put last; removing it leaves the others.
func TestPutReplacesByName(t *testing.T) {
	var c Catalog
	c.Put(catalog.Model{Name: "a", ContextLength: 1})
	c.Put(catalog.Model{Name: "b"})
	c.Put(catalog.Model{Name: "a", ContextLength: 2})
	got, _ := c.List(context.Background())
	if len(got) != 2 || got[0].Name != "b" || got[1].Name != "a" || got[1].ContextLength != 2 {
		t.Fatalf("after putting a, b and a again: %+v; want b then a with the second settings", got)
	}
	got[0].Name = "changed"
	c.Remove("a")
	if got, _ := c.List(context.Background()); len(got) != 1 || got[0].Name != "b" {
		t.Errorf("after removing a (and changing a listed copy): %+v; want b alone", got)
	}
}

// TestAModelChangedAfterPutIsNotTheCatalogs: a test that changes a
// profile of a model it put, before putting it again, changes nothing the
// code under test reads until then; nor does a caller that changes what
// it listed.
func TestAModelChangedAfterPutIsNotTheCatalogs(t *testing.T) {
	var c Catalog
	m := catalog.Model{Name: "a", Profiles: []catalog.Profile{{Name: "cpu", RAMBytes: 1 << 30}}}
	c.Put(m)
	m.Profiles[0].RAMBytes = 3 << 30
	listed, _ := c.List(context.Background())
	if got := listed[0].Profiles[0].RAMBytes; got != 1<<30 {
		t.Errorf("the catalog's entry holds %d bytes after the test changed its own copy, want %d", got, 1<<30)
	}
	listed[0].Profiles[0].RAMBytes = 5 << 30
	again, _ := c.List(context.Background())
	if got := again[0].Profiles[0].RAMBytes; got != 1<<30 {
		t.Errorf("a caller's change to what it listed reached the catalog: %d bytes", got)
	}
	c.Put(m)
	again, _ = c.List(context.Background())
	if got := again[0].Profiles[0].RAMBytes; got != 3<<30 {
		t.Errorf("put again, the entry holds %d bytes, want %d", got, 3<<30)
	}
}

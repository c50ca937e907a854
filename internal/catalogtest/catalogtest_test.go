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

// Package catalogtest is a catalog a test changes in memory, for the code
// that only reads the catalog (a fleet's Catalog: List). Several test
// packages each wrote one, the same but for a method's name; a test of
// what the catalog itself keeps uses the real one in SQLite instead.
package catalogtest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"modelserve/catalog"
)

// Catalog holds models in memory; its zero value is empty and ready to
// use. It is safe for concurrent use: the code under test lists while the
// test puts and removes.
type Catalog struct {
	mu     sync.Mutex
	models []catalog.Model
}

// List is every model, in the order put (a model put again comes last),
// each a copy of its own, as the real catalog reads each afresh from its
// database: what the caller changes is not the catalog's.
func (c *Catalog) List(context.Context) ([]catalog.Model, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]catalog.Model, len(c.models))
	for i, m := range c.models {
		out[i] = copyOf(m)
	}
	return out, nil
}

// Put adds m, or replaces the model of its name: an operator adding a
// model, or changing its settings. The catalog keeps a copy of m, as the
// real one writes it down: a test that changes m's profiles afterwards
// and puts it again changes the catalog then, not before.
func (c *Catalog) Put(m catalog.Model) {
	m = copyOf(m)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.models = slices.DeleteFunc(c.models, func(o catalog.Model) bool { return o.Name == m.Name })
	c.models = append(c.models, m)
}

// copyOf is m with nothing shared: through its JSON, which is how the
// real catalog keeps an entry.
func copyOf(m catalog.Model) catalog.Model {
	b, err := json.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("catalogtest: a model that does not encode: %v", err))
	}
	var out catalog.Model
	if err := json.Unmarshal(b, &out); err != nil {
		panic(fmt.Sprintf("catalogtest: a model that does not decode: %v", err))
	}
	return out
}

// Remove removes the model called name, if there is one.
func (c *Catalog) Remove(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.models = slices.DeleteFunc(c.models, func(m catalog.Model) bool { return m.Name == name })
}

// Package catalogtest is a catalog a test changes in memory, for the code
// that only reads the catalog (a fleet's Catalog: List). Several test
// packages each wrote one, the same but for a method's name; a test of
// what the catalog itself keeps uses the real one in SQLite instead.
package catalogtest

import (
	"context"
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
// as a copy the caller may keep.
func (c *Catalog) List(context.Context) ([]catalog.Model, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.models), nil
}

// Put adds m, or replaces the model of its name: an operator adding a
// model, or changing its settings.
func (c *Catalog) Put(m catalog.Model) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.models = slices.DeleteFunc(c.models, func(o catalog.Model) bool { return o.Name == m.Name })
	c.models = append(c.models, m)
}

// Remove removes the model called name, if there is one.
func (c *Catalog) Remove(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.models = slices.DeleteFunc(c.models, func(m catalog.Model) bool { return m.Name == name })
}

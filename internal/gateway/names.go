package gateway

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"modelserve/catalog"
)

// names resolves what a request asks for (a catalog name or alias) to the
// catalog's model, and a model to its canary. The catalog is read at most
// once per every, not on every request; a name not found is looked up
// again at once (at most once per missEvery), so a model just added
// answers its first request.
//
// The canaries are read with the names, in the same read: a canary added,
// its share changed or removed is seen by the first request once every
// (Options.CatalogEvery, 1 s unless set) has passed since the last read,
// or by the next request after refresh. Its model's name was already
// known, so nothing else prompts a read.
type names struct {
	catalog Catalog
	every   time.Duration
	clock   clock.Clock // the gateway's: when the catalog is read again

	mu   sync.Mutex
	read time.Time
	// reading is closed when the read of the catalog in flight ends; nil
	// when none is. The catalog is read without mu: a read takes
	// milliseconds at a hundred models, more while jobs write and the
	// console draws, and every request of every model waited for it
	// when it was read under mu; now they go on with the names as last
	// read, and only a name not known waits for the read.
	reading chan struct{}
	// changes counts refresh: a read begun before one may not hold the
	// change, so it is not taken as fresh.
	changes uint64
	models  []catalog.Model
	byName  map[string]int // name or alias → index in models
	// canaryOf is, by model name, the index of its canary: the entry whose
	// Canary.Of names it, the newest (AddedAt) if several claim it.
	canaryOf map[string]int
}

// missEvery spaces the reads a stream of unknown names causes.
const missEvery = 100 * time.Millisecond

// lookup is the model asked answers to, and whether there is one.
func (n *names) lookup(ctx context.Context, asked string) (catalog.Model, bool, error) {
	models, byName, err := n.current(ctx, false)
	if err != nil {
		return catalog.Model{}, false, err
	}
	if i, ok := byName[asked]; ok {
		return models[i], true, nil
	}
	if models, byName, err = n.current(ctx, true); err != nil {
		return catalog.Model{}, false, err
	}
	i, ok := byName[asked]
	if !ok {
		return catalog.Model{}, false, nil
	}
	return models[i], true, nil
}

// removed is whether the catalog, as last read (read again when due),
// has no entry named model: one removed while its requests waited.
func (n *names) removed(ctx context.Context, model string) bool {
	models, _, err := n.current(ctx, false)
	if err != nil {
		return false // not known to be gone: the wait goes on
	}
	for _, m := range models {
		if m.Name == model {
			return false
		}
	}
	return true
}

// canary is model's canary as the catalog was last read (lookup reads it
// when due), and whether it has one.
func (n *names) canary(model string) (catalog.Model, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	i, ok := n.canaryOf[model]
	if !ok {
		return catalog.Model{}, false
	}
	return n.models[i], true
}

// refresh has the next lookup read the catalog.
func (n *names) refresh() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.read = time.Time{}
	n.changes++
}

// list is the catalog's models, read at most every n.every.
func (n *names) list(ctx context.Context) ([]catalog.Model, error) {
	models, _, err := n.current(ctx, false)
	return models, err
}

// current is the catalog's models and the index of their names and
// aliases, read again when every has passed (or missEvery, for a name
// missed). One read at a time: while it is in flight the others are
// answered from the last, but for a name missed, which waits for it.
func (n *names) current(ctx context.Context, missed bool) ([]catalog.Model, map[string]int, error) {
	for {
		n.mu.Lock()
		age := n.clock.Since(n.read)
		fresh := n.byName != nil && age < n.every && (!missed || age < missEvery)
		if fresh || (n.byName != nil && !missed && n.reading != nil) {
			models, byName := n.models, n.byName
			n.mu.Unlock()
			return models, byName, nil
		}
		if wait := n.reading; wait != nil {
			n.mu.Unlock()
			select {
			case <-wait:
				continue // read: fresh now, or failed and read again here
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
		done, changes := make(chan struct{}), n.changes
		n.reading = done
		n.mu.Unlock()
		models, byName, canaryOf, err := n.readCatalog(ctx)
		n.mu.Lock()
		n.reading = nil
		close(done)
		if err == nil {
			n.models, n.byName, n.canaryOf = models, byName, canaryOf
			if n.changes == changes {
				n.read = n.clock.Now()
			}
		}
		n.mu.Unlock()
		return models, byName, err
	}
}

// readCatalog reads the catalog and indexes it: each name and alias to
// its model, each model to its canary.
func (n *names) readCatalog(ctx context.Context) ([]catalog.Model, map[string]int, map[string]int, error) {
	models, err := n.catalog.List(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	byName := make(map[string]int, len(models))
	canaryOf := map[string]int{}
	for i, m := range models {
		byName[m.Name] = i
		for _, a := range m.Aliases {
			byName[a] = i
		}
		if c := m.Canary; c != nil {
			if j, ok := canaryOf[c.Of]; !ok || m.AddedAt.After(models[j].AddedAt) {
				canaryOf[c.Of] = i
			}
		}
	}
	return models, byName, canaryOf, nil
}

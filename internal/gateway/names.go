package gateway

import (
	"context"
	"sync"
	"time"

	"modelserve/catalog"
)

// names resolves what a request asks for (a catalog name or alias) to the
// catalog's model. The catalog is read at most once per every, not on
// every request; a name not found is looked up again at once (at most once
// per missEvery), so a model just added answers its first request.
type names struct {
	catalog Catalog
	every   time.Duration

	mu     sync.Mutex
	read   time.Time
	models []catalog.Model
	byName map[string]int // name or alias → index in models
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

// list is the catalog's models, read at most every n.every.
func (n *names) list(ctx context.Context) ([]catalog.Model, error) {
	models, _, err := n.current(ctx, false)
	return models, err
}

func (n *names) current(ctx context.Context, missed bool) ([]catalog.Model, map[string]int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	age := time.Since(n.read)
	if n.byName != nil && age < n.every && (!missed || age < missEvery) {
		return n.models, n.byName, nil
	}
	models, err := n.catalog.List(ctx)
	if err != nil {
		return nil, nil, err
	}
	byName := make(map[string]int, len(models))
	for i, m := range models {
		byName[m.Name] = i
		for _, a := range m.Aliases {
			byName[a] = i
		}
	}
	n.models, n.byName, n.read = models, byName, time.Now()
	return models, byName, nil
}

package fleet

import (
	"context"
	"slices"
	"sync"
	"time"

	"modelserve/catalog"
)

// Store is the catalog's store as NotifyingCatalog wraps it
// (catalog.Store).
type Store interface {
	Add(ctx context.Context, m catalog.Model, by string) error
	AddNew(ctx context.Context, m catalog.Model, by string) error
	Remove(ctx context.Context, name string) error
	SetScaling(ctx context.Context, name string, min, max int, idleAfter *time.Duration) error
	SetShare(ctx context.Context, name string, share float64) error
	Get(ctx context.Context, name string) (catalog.Model, error)
	List(ctx context.Context) ([]catalog.Model, error)
	Page(ctx context.Context, q catalog.PageQuery) (catalog.Page, error)
}

// NotifyingCatalog is a catalog store that has the fleet look at the
// catalog after each change it makes, so a model added by a job starts
// within a moment rather than at the fleet's next tick, and a removed one
// stops as soon. Hand it to whatever changes the catalog (jobs, handlers)
// in place of the store.
//
// A change returns once the fleet has looked (Fleet.Sync), up to a few
// seconds: a job that adds a model and then reads its health reads it
// about the entry just written, not a parking of the one it replaced.
type NotifyingCatalog struct {
	store Store
	fleet Syncer

	mu        sync.Mutex
	listeners []func()
}

// Syncer is what NotifyingCatalog tells of a change (Fleet).
type Syncer interface {
	Sync(ctx context.Context) error
}

// syncWait bounds the wait for the fleet after a change: the change is
// made and the fleet poked whatever happens, so a slow fleet only loses
// the guarantee of a fresh health.
const syncWait = 5 * time.Second

// NewNotifyingCatalog wraps store so that f looks after each change.
func NewNotifyingCatalog(store Store, f Syncer) *NotifyingCatalog {
	return &NotifyingCatalog{store: store, fleet: f}
}

// OnChange has fn called after each change, before the fleet is waited
// for: the gateway's names (gateway.Gateway.Refresh), which would
// otherwise list a model removed, or miss one just served, for up to a
// second.
func (c *NotifyingCatalog) OnChange(fn func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.listeners = append(c.listeners, fn)
}

func (c *NotifyingCatalog) notify() {
	c.mu.Lock()
	fns := slices.Clone(c.listeners)
	c.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

func (c *NotifyingCatalog) changed(ctx context.Context) {
	c.notify()
	ctx, cancel := context.WithTimeout(ctx, syncWait)
	defer cancel()
	_ = c.fleet.Sync(ctx)
}

// Add is Store.Add, then the fleet looks.
func (c *NotifyingCatalog) Add(ctx context.Context, m catalog.Model, by string) error {
	if err := c.store.Add(ctx, m, by); err != nil {
		return err
	}
	c.changed(ctx)
	return nil
}

// AddNew is Store.AddNew, then the fleet looks.
func (c *NotifyingCatalog) AddNew(ctx context.Context, m catalog.Model, by string) error {
	if err := c.store.AddNew(ctx, m, by); err != nil {
		return err
	}
	c.changed(ctx)
	return nil
}

// Remove is Store.Remove, then the fleet looks.
func (c *NotifyingCatalog) Remove(ctx context.Context, name string) error {
	if err := c.store.Remove(ctx, name); err != nil {
		return err
	}
	c.changed(ctx)
	return nil
}

// SetShare is Store.SetShare, then the listeners hear of it: the gateway
// reads the share from the catalog; the fleet has nothing to do.
func (c *NotifyingCatalog) SetShare(ctx context.Context, name string, share float64) error {
	if err := c.store.SetShare(ctx, name, share); err != nil {
		return err
	}
	c.notify()
	return nil
}

// Get is Store.Get.
func (c *NotifyingCatalog) Get(ctx context.Context, name string) (catalog.Model, error) {
	return c.store.Get(ctx, name)
}

// List is Store.List.
func (c *NotifyingCatalog) List(ctx context.Context) ([]catalog.Model, error) {
	return c.store.List(ctx)
}

// Page is Store.Page.
func (c *NotifyingCatalog) Page(ctx context.Context, q catalog.PageQuery) (catalog.Page, error) {
	return c.store.Page(ctx, q)
}

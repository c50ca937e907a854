package fleet

import "context"

// SetScaling is Store.SetScaling, then the fleet looks: a model scaled up
// starts its replicas within a moment, one scaled down stops the surplus.
func (c *NotifyingCatalog) SetScaling(ctx context.Context, name string, min, max int) error {
	if err := c.store.SetScaling(ctx, name, min, max); err != nil {
		return err
	}
	c.changed(ctx)
	return nil
}

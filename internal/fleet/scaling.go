package fleet

import (
	"context"
	"time"
)

// SetScaling is Store.SetScaling, then the fleet looks: a model scaled up
// starts its replicas within a moment, one scaled down stops the surplus,
// and a new idle time counts from the model's last request.
func (c *NotifyingCatalog) SetScaling(ctx context.Context, name string, min, max int, idleAfter *time.Duration) error {
	if err := c.store.SetScaling(ctx, name, min, max, idleAfter); err != nil {
		return err
	}
	c.changed(ctx)
	return nil
}

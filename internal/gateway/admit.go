package gateway

import (
	"context"
	"time"

	"modelserve/catalog"
	"modelserve/internal/fleet"
)

// Waiting requests look again whenever a slot frees, and besides every
// pollCold while no replica is ready (a model loading: the fleet sees it
// ready within its own 50 ms poll) or pollBusy while replicas exist but
// are full (a replica added by scaling up).
const (
	pollCold = 20 * time.Millisecond
	pollBusy = 250 * time.Millisecond
)

// wanted is how many replicas a model needs for the requests in flight and
// waiting, this one included, at the slots its replicas have: one more
// than it runs when every slot is taken and requests queue. With no
// replica ready it is one, whatever the number of first requests: they
// start one replica between them, not one each.
func wanted(p *pool, rs []fleet.Replica) int {
	if len(rs) == 0 {
		return 1
	}
	slots := 0
	for _, r := range rs {
		slots += slotsOf(r)
	}
	inFlight, waiting := p.counts()
	perReplica := max(1, slots/len(rs))
	return (inFlight + waiting + perReplica) / perReplica // ceil((inFlight+waiting+1)/perReplica)
}

// admit waits for a replica of m with a free slot and takes the slot, or
// says why there is none: the model is parked or cannot be placed (503),
// too many requests wait already (429), none became ready in time (503),
// or the client went away (ctx's error, nil apiError never). rs are m's
// ready replicas as the caller last read them.
func (g *Gateway) admit(ctx context.Context, m catalog.Model, key uint64, rs []fleet.Replica) (fleet.Replica, *apiError) {
	p := g.pool(m.Name)
	var deadline <-chan time.Time
	queued := false
	leave := func() {
		if queued {
			p.mu.Lock()
			p.waiting--
			p.mu.Unlock()
			g.metrics.queued(m.Name, -1)
		}
	}
	for {
		now := time.Now()
		p.mu.Lock()
		if r, ok := p.pick(rs, key, now); ok {
			p.take(r.ID)
			if !p.coldSince.IsZero() {
				g.metrics.coldStarted(m.Name, now.Sub(p.coldSince))
				p.coldSince = time.Time{}
			}
			p.mu.Unlock()
			leave()
			return r, nil
		}
		if !queued {
			if p.waiting >= g.opts.MaxQueue {
				waiting := p.waiting
				p.mu.Unlock()
				return fleet.Replica{}, queueFull(m.Name, waiting)
			}
			p.waiting++
			queued = true
			g.metrics.queued(m.Name, 1)
			t := time.NewTimer(g.opts.MaxWait)
			defer t.Stop()
			deadline = t.C
		}
		if len(rs) == 0 && p.coldSince.IsZero() {
			p.coldSince = now
		}
		wake := p.wake
		p.mu.Unlock()

		poll := pollBusy
		if len(rs) == 0 {
			poll = pollCold
			if aerr := g.unstartable(m.Name); aerr != nil {
				p.mu.Lock()
				p.coldSince = time.Time{}
				p.mu.Unlock()
				leave()
				return fleet.Replica{}, aerr
			}
		}
		t := time.NewTimer(poll)
		select {
		case <-wake:
		case <-t.C:
		case <-deadline:
			t.Stop()
			leave()
			if len(rs) == 0 {
				return fleet.Replica{}, unavailable("model_not_ready", m.Name+" has no replica ready after "+
					g.opts.MaxWait.String()+" of waiting: the fleet page says how its start is going; retry later")
			}
			p.mu.Lock()
			waiting := p.waiting
			p.mu.Unlock()
			return fleet.Replica{}, queueFull(m.Name, waiting)
		case <-ctx.Done():
			t.Stop()
			leave()
			return fleet.Replica{}, unavailable("client_gone", "the request ended before a replica was free")
		}
		t.Stop()
		rs = g.opts.Fleet.Serving(m.Name)
	}
}

// unstartable says why no replica of model will come: it is parked after
// failed starts, or cannot be placed. Nil while one may yet start.
func (g *Gateway) unstartable(model string) *apiError {
	for _, h := range g.opts.Fleet.ModelHealth() {
		if h.Model != model {
			continue
		}
		switch {
		case h.Parked:
			return unavailable("model_parked", model+" is parked, and no replica of it starts: "+h.Reason)
		case h.Unplaceable && h.Ready == 0:
			return unavailable("model_unplaceable", model+" has no replica: no node has room for one: "+h.Placement)
		}
	}
	return nil
}

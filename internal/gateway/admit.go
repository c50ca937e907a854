package gateway

import (
	"context"
	"slices"
	"time"

	"modelserve/catalog"
	"modelserve/internal/fleet"
)

// A request waiting for a slot is handed one by the request that frees
// it (pool.grant), and one waiting for a replica to start is woken when
// the fleet says a replica is ready (Gateway.replicaReady). Besides, it
// reads the ready replicas again every pollCold while none is ready and
// the fleet does not tell (a fleet without OnReady), and every pollBusy
// in any case: a replica gone from the fleet's ready ones.
const (
	pollCold = 20 * time.Millisecond
	pollBusy = 250 * time.Millisecond
	// turnedAwayFor is how long a request the fleet refused a hold on a
	// replica it still calls ready (Fleet.Hold: kept for a model asked for
	// before the request) is not offered that replica, and how often it
	// looks again meanwhile. Offered it again at once, the request was
	// handed the slot it had just given back and refused again, hundreds
	// of times a second; offered it a poll (or reofferAfter) later, a
	// request of its model asked after it, arriving once the fleet had let
	// the replica go on, took the replica first.
	turnedAwayFor = 20 * time.Millisecond
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
// or the client went away (ctx's error, nil apiError never). It chooses
// among m's ready replicas as its pool last read them (pool.read, which
// the caller does first). The replica chosen is held (Fleet.Hold, for
// the request as asked at asked) until release: the fleet retires it only
// once the request is over. Replicas in avoid (by id and address: an
// engine started again has a new one) already failed this request, and
// are not offered it again while
// another is ready; with none other ready, admit waits for one (for
// reofferAfter, then offers a failed one the fleet still calls ready
// once more), but for a stand-in (a canary), whose model answers instead
// at once. place is the request's place by arrival: 0 the first time,
// then the one admit gave it, so a request that comes back after a
// replica did not answer it goes back where it was in the queue, ahead
// of those that came after it. tw, when tracing, is told of the waits and
// the choice.
//
// The slot's turn is the request's to go on to the replica: it is sent
// (slot.sent) once the request is written to the engine, and the
// requests handed slots after it go on only then, so the engine reads
// them in the order they waited.
func (g *Gateway) admit(ctx context.Context, m catalog.Model, asked time.Time, key uint64, avoid []fleet.Replica, place *uint64, standIn bool, tw *waitTrace) (fleet.Replica, slot, *apiError) {
	p := g.pool(m.Name)
	w := newWaiter(key, avoid, g.clock.Now(), tw.explain())
	if place != nil {
		w.seq = *place
		defer func() { *place = w.seq }()
	}
	var deadline <-chan time.Time
	queued := false
	leave := func(aerr *apiError) {
		p.leave(w)
		if queued {
			g.metrics.queued(m.Name, -1)
		}
		tw.failed(aerr)
	}
	for {
		now := g.clock.Now()
		p.mu.Lock()
		rs := w.offer(p.ready, now)
		c, ok := p.enqueue(w, now)
		if !ok {
			if len(rs) == 0 && standIn {
				// Its replica was retired (the canary promoted or rolled
				// back) since the split chose it.
				p.mu.Unlock()
				aerr := unavailable("model_not_ready", m.Name+" has no replica ready")
				leave(aerr)
				return fleet.Replica{}, slot{}, aerr
			}
			if !queued {
				if waiting := len(p.queue) - 1; waiting >= g.opts.MaxQueue {
					p.mu.Unlock()
					aerr := g.full(m.Name, waiting)
					leave(aerr)
					return fleet.Replica{}, slot{}, aerr
				}
				queued = true
				g.metrics.queued(m.Name, 1)
				t := g.clock.NewTimer(g.opts.MaxWait)
				defer t.Stop()
				deadline = t.C()
			}
			if len(rs) == 0 && len(w.avoid) == 0 && p.coldSince.IsZero() {
				p.coldSince = now
			}
			wake, ahead := p.wake, len(p.queue)-1
			p.mu.Unlock()
			if len(rs) == 0 {
				tw.cold()
			} else {
				tw.queued(ahead, len(rs))
			}
			var aerr *apiError
			if c, ok, aerr = g.await(ctx, p, w, m.Name, len(rs) == 0, wake, deadline); aerr != nil {
				leave(aerr)
				return fleet.Replica{}, slot{}, aerr
			}
			if !ok {
				p.read()
				continue
			}
			p.mu.Lock()
			rs = w.offer(p.ready, g.clock.Now())
		}
		if !p.coldSince.IsZero() {
			g.metrics.coldStarted(m.Name, g.clock.Since(p.coldSince))
			p.coldSince = time.Time{}
		}
		p.mu.Unlock()
		r := c.replica
		// Those handed slots before it go on first; it goes on once it
		// is written to the engine (slot.sent), and the next may follow.
		p.goes(c.turn, r.ID)
		release, held := g.opts.Fleet.Hold(r.ID, asked)
		if !held {
			// Retired since the replicas were read, or kept for a model
			// asked for before this request that waits for its room (the
			// fleet still calls it ready): it takes no request of this
			// one's now. The request keeps its place in the queue.
			// A retired one leaves the ready replicas as they are read
			// again; one kept is offered again a moment later.
			p.gone(c.turn)
			p.read()
			p.give(r.ID, time.Time{})
			w.turned, w.turnedAway = r, g.clock.Now()
			continue
		}
		if queued {
			g.metrics.queued(m.Name, -1)
		}
		tw.routed(c, len(rs))
		return r, slot{p: p, turn: c.turn, release: release}, nil
	}
}

// slot is a request's slot on a replica, from admit: its turn to go on to
// the replica, and its hold on it.
type slot struct {
	p       *pool
	turn    uint64 // 0: none, or gone already
	release func()
}

// sent says the request was written to the engine, or will not be: the
// requests handed slots after it may go on.
func (s *slot) sent() {
	if s.turn != 0 {
		s.p.gone(s.turn)
		s.turn = 0
	}
}

// done lets go of the slot's hold (the request is over), and of its turn
// if it never went on.
func (s *slot) done() {
	s.sent()
	if s.release != nil {
		s.release()
	}
}

// await waits, as w in p's queue, for the replica a freed slot hands it
// (ok), or until the replicas are to be read again (not ok, no error): one
// became ready (wake), or a poll's time passed. It says why the request
// is to wait no longer: cold, the model has no replica ready, and the
// fleet says none will start; the deadline passed; or the client went
// away.
func (g *Gateway) await(ctx context.Context, p *pool, w *waiter, model string, cold bool, wake <-chan struct{}, deadline <-chan time.Time) (choice, bool, *apiError) {
	poll := pollBusy
	if w.justTurnedAway(g.clock.Now()) {
		poll = turnedAwayFor
	}
	if cold {
		if !g.readyTold {
			poll = pollCold
		}
		if g.handedOver.Load() {
			return choice{}, false, handingOver(model)
		}
		if aerr := g.unstartable(model); aerr != nil {
			p.mu.Lock()
			p.coldSince = time.Time{}
			p.mu.Unlock()
			return choice{}, false, aerr
		}
	}
	t := g.clock.NewTimer(poll)
	defer t.Stop()
	select {
	case c := <-w.got:
		return c, true, nil
	case <-wake:
	case <-t.C():
	case <-deadline:
		if cold {
			if aerr := g.kept(model, 0); aerr != nil {
				return choice{}, false, aerr
			}
			return choice{}, false, unavailable("model_not_ready", model+" has no replica ready after "+
				g.opts.MaxWait.String()+" of waiting: the fleet page says how its start is going; retry later")
		}
		_, waiting := p.counts()
		return choice{}, false, g.full(model, waiting-1)
	case <-ctx.Done():
		return choice{}, false, unavailable("client_gone", "the request ended before a replica was free")
	}
	return choice{}, false, nil
}

// full is the answer to a request for model past its queue's limit,
// with waiting requests ahead of it: 429, to retry when the fleet's
// residency that keeps model's room (kept) ends, or in a moment.
func (g *Gateway) full(model string, waiting int) *apiError {
	if aerr := g.kept(model, waiting); aerr != nil {
		return aerr
	}
	return queueFull(model, waiting)
}

// kept is, for model waiting for room the fleet keeps for another
// model's residency (fleet.ModelHealth.ResidencyEnds), the 429 a request
// past its queue's limit (waiting ahead of it, or its wait's bound) is
// answered with, to retry once the residency ends; nil when none keeps
// it. Retried sooner, the request would find the room kept still.
func (g *Gateway) kept(model string, waiting int) *apiError {
	for _, h := range g.opts.Fleet.ModelHealth() {
		if h.Model != model || h.ResidencyEnds.IsZero() {
			continue
		}
		left := h.ResidencyEnds.Sub(g.clock.Now())
		if left <= 0 {
			return nil
		}
		return residencyFull(model, waiting, h.Placement, left)
	}
	return nil
}

// reofferAfter is how long a request waits for another replica before it
// is offered again to one that did not answer it and is still called
// ready. A retired replica leaves the ready ones at once, so it is never
// offered again.
const reofferAfter = 500 * time.Millisecond

// without is rs but the replicas in avoid, told apart by id and address.
func without(rs, avoid []fleet.Replica) []fleet.Replica {
	if len(avoid) == 0 {
		return rs
	}
	out := make([]fleet.Replica, 0, len(rs))
	for _, r := range rs {
		if !avoided(avoid, r) {
			out = append(out, r)
		}
	}
	return out
}

// avoided is whether r is in avoid, told apart by id and address.
func avoided(avoid []fleet.Replica, r fleet.Replica) bool {
	return slices.ContainsFunc(avoid, func(a fleet.Replica) bool { return a.ID == r.ID && a.Endpoint == r.Endpoint })
}

// unstartable says why no replica of model will come: it was removed from
// the catalog while the request waited (404, as for a model never there),
// it is parked after failed starts, or it cannot be placed. Nil while one
// may yet start.
func (g *Gateway) unstartable(model string) *apiError {
	// Wall time: it bounds a read of the catalog's database.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if g.names.removed(ctx, model) {
		return modelRemoved(model)
	}
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

package gateway

import (
	"context"
	"math"
	"sync"

	"modelserve/catalog"
)

// A model's canary (catalog.Canary: a new version run beside it while it is
// judged) takes its Share of the requests that name the model. The split
// is counted, not drawn: with share s the n-th request goes to the canary
// when floor(n·s) passes an integer, so 10% of 200 requests is 20 exactly,
// and a judge comparing the two versions compares the share it was told.
// Only requests that could go to the canary are counted: the canary has a
// ready replica and a share above 0. The count starts again when the
// canary or its share changes, so each step of a promotion (0.1, then 1)
// holds from its first request.

// splits are the counts of each model's requests split with its canary.
type splits struct {
	mu      sync.Mutex
	byModel map[string]*splitCount
}

type splitCount struct {
	canary string
	// p/q is the share (fraction's).
	p, q int64
	// n is the requests counted, modulo q: whether the n-th goes to the
	// canary repeats every q requests, as floor(n·p/q) grows by p.
	n int64
}

// toCanary counts one more request of model that canary may take for
// share of them, and says whether it does.
func (s *splits) toCanary(model, canary string, share float64) bool {
	p, q := fraction(share)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.byModel[model]
	if c == nil || c.canary != canary || c.p != p || c.q != q {
		c = &splitCount{canary: canary, p: p, q: q}
		s.byModel[model] = c
	}
	c.n = c.n%q + 1
	return c.n*p/q > (c.n-1)*p/q
}

// fraction is share (clamped to 0..1) as p/q, counted in integers: the
// first convergent of its continued fraction within 1e-9 of it, so the
// share meant is the share split, where floating point would not give it
// (0.29 is 29/100, though 0.29·200 is 57.99999999999999; 0.3333333333333333
// is 1/3). q is at most a billion.
func fraction(share float64) (p, q int64) {
	switch {
	case !(share > 0):
		return 0, 1
	case share >= 1:
		return 1, 1
	}
	const tolerance, maxQ = 1e-9, 1_000_000_000
	// The convergents h/k, from h₋₂/k₋₂ = 0/1 and h₋₁/k₋₁ = 1/0.
	h0, h1, k0, k1 := int64(0), int64(1), int64(1), int64(0)
	x := share
	for {
		a := int64(x)
		h, k := a*h1+h0, a*k1+k0
		if k > maxQ {
			return h1, k1
		}
		h0, h1, k0, k1 = h1, h, k1, k
		if math.Abs(float64(h)/float64(k)-share) <= tolerance || x == float64(a) {
			return h, k
		}
		x = 1 / (x - float64(a))
	}
}

// canaryFor is the canary that takes this request for m, when the split
// gives it one: m has a canary with a share above 0 and a ready replica,
// and the request's turn has come. A canary asked for by name (modelserve's
// own caller) is not split again.
func (g *Gateway) canaryFor(m catalog.Model) (catalog.Model, bool) {
	if m.Canary != nil {
		return catalog.Model{}, false
	}
	c, ok := g.names.canary(m.Name)
	if !ok || c.Canary.Share <= 0 || len(g.opts.Fleet.Serving(c.Name)) == 0 {
		return catalog.Model{}, false
	}
	return c, g.splits.toCanary(m.Name, c.Name, c.Canary.Share)
}

// Split says where the requests naming model (its name or an alias) go
// now: share of them to the catalog entry canary, the rest to model. ok is
// false when model has no canary (or is unknown, or is a canary itself).
// share is the canary's while it has a ready replica, and 0 while it has
// none, since model then takes them all. It is the catalog as the gateway
// last read it, at most Options.CatalogEvery ago (see Refresh).
func (g *Gateway) Split(model string) (canary string, share float64, ok bool) {
	m, ok, err := g.names.lookup(context.Background(), model)
	if err != nil {
		g.log.Error("reading the catalog for a model's split", "model", model, "err", err)
		return "", 0, false
	}
	if !ok || m.Canary != nil {
		return "", 0, false
	}
	c, ok := g.names.canary(m.Name)
	if !ok {
		return "", 0, false
	}
	if len(g.opts.Fleet.Serving(c.Name)) == 0 {
		return c.Name, 0, true
	}
	return c.Name, c.Canary.Share, true
}

// Refresh has the next request read the catalog again, rather than use
// the names and canaries read up to Options.CatalogEvery ago: whoever
// changes a canary's share can have requests follow at once.
func (g *Gateway) Refresh() { g.names.refresh() }

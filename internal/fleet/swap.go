package fleet

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"modelserve/catalog"
	"modelserve/internal/words"
)

// Swapping: there are more models than memory. A model that wants a
// replica where no node has room takes the room of idle replicas of models
// served on demand, as an operator with one machine and five models
// expects: the least recently used first, as few as will do, opportunistic
// before standard. This is the one rule of which replica may be stopped to
// make room (MakeRoom asks it); never a critical model's, never one
// its model's Scaling.Min keeps, never one answering or about to answer a
// request. Requests waiting for room are served in the order they came:
// models are placed in the order they were first asked for, a busy
// replica whose model was asked for again after another model began to
// wait for its room is given back once the answers it has end (it drains,
// drain.go), so a model asked for again and again does not starve a
// waiting one, and a busy replica a model waits on takes no new request
// asked after that model's (Owed, order.go). A critical model may also
// take the room of opportunistic replicas that are busy: they drain
// first.
//
// Residency: a replica swapped in and used is kept a while before it is
// given back for another model on demand. Without it two models asked
// for in turn, one client alternating them with one token, took the room
// from each other at every request: 361 swaps a minute with tiny models
// (each a load of seconds with real ones), and a third model's answers
// on the same machine went from 4 ms to 250 ms at the median. A replica
// that has taken a request since it became ready is kept until its
// residency has passed (Residency: ResidencyLoads of its own loads, and
// no less than a floor, the fleets' Options.Residency); the model that
// needs its room waits its turn meanwhile, and the fleet looks again the
// moment the residency ends. A critical model does not wait for an
// opportunistic one's, as it waits for none of theirs.

// give is what a replica is to a model that needs its room.
type give int

const (
	keep         give = iota // never given back for it
	idleGive                 // idle on demand: given back now
	busyGive                 // on demand, but answering or about to: given back once idle
	drainGive                // answering, and asked for again after m began to wait: given back once its answers end
	residentGive             // used within its residency: given back, if still unused by others' rules, once it ends
)

// ResidencyLoads is how many of its own loads a replica that was used
// stays at the least before it is given back for another model: with
// ten, loading is at most a tenth of a replica's stay, so however two
// models are asked for in turn a node spends no more than about a tenth
// of its time loading engines, and a model that takes 6 s to load stays
// a minute once used.
const ResidencyLoads = 10

// DefaultResidency is the least residency when a fleet's options do not
// say: long enough that a model that loads in a blink (a small one, from
// the page cache) still swaps at most a dozen times a minute, short
// enough that the model asked for next waits seconds, not minutes.
const DefaultResidency = 5 * time.Second

// Residency is how long a replica whose engine took load to become ready
// is kept once used: ResidencyLoads times load, and no less than floor;
// none when floor is negative (residency off).
func Residency(floor, load time.Duration) time.Duration {
	if floor < 0 {
		return 0
	}
	return max(floor, ResidencyLoads*load)
}

// Holder is a replica holding room another model needs, as the swap rule
// sees it. Both fleets describe their replicas so and ask the rule which
// to give back (Victims): the local fleet its engines, the Kubernetes
// fleet its pods, whose Deployments it scales to 0.
type Holder struct {
	ID, Model string
	// Class and Min are its model's: its class (ClassOrDefault) and the
	// replicas its Scaling.Min keeps.
	Class string
	Min   int
	// Busy is a replica answering a request or about to (its model is in
	// use, or it is not ready yet); Ready one that takes requests now.
	Busy, Ready bool
	// Answering is how many requests it answers now (Drains.Holds), which
	// a model waiting for its room is told.
	Answering int
	// Behind is a busy replica whose model was asked for again after the
	// asker began to wait: it is given back once its answers end.
	Behind bool
	// Ahead is a replica whose model has a request unanswered that was
	// asked before the asker's oldest waiting one: that request's to
	// answer (or to start for) first.
	Ahead bool
	// LastUsed is when its model was last asked for; the zero time when
	// not since its demand was forgotten.
	LastUsed time.Time
	// Held is what it holds of what the asker needs: bytes, or cards.
	Held int64
	// Resided is the residency it has, once it was used since it became
	// ready, and KeptUntil when that ends while it has not yet: it is
	// not given back for a model on demand before then (Reside).
	Resided   time.Duration
	KeptUntil time.Time
}

// Reside sets h's residency as of now: a replica that became ready at
// readyAt, its engine having taken load to get there, and took a request
// at used (the zero time: none since it became ready) is kept until
// readyAt plus its Residency (floor the least, negative for none). One
// never used since it became ready is not kept: nobody wants it. Both
// fleets reside their holders so, by their own clock's now.
func (h *Holder) Reside(readyAt time.Time, load time.Duration, used time.Time, floor time.Duration, now time.Time) {
	h.Resided, h.KeptUntil = 0, time.Time{}
	d := Residency(floor, load)
	if readyAt.IsZero() || used.IsZero() || used.Before(readyAt) || d <= 0 {
		return
	}
	h.Resided = d
	if end := readyAt.Add(d); now.Before(end) {
		h.KeptUntil = end
	}
}

// Place says where h's model stands against an asker waiting for room:
// asked is when h's model's oldest unanswered request was asked, waits
// when the asker's was. A ready replica all of whose model's requests
// came after the asker's is Behind it (one starting is let answer what it
// was started for); one whose model has a request asked before is Ahead
// (Waited). Both fleets place their holders so.
func (h *Holder) Place(asked, waits time.Time) {
	h.Behind = h.Ready && Behind(asked, waits)
	h.Ahead = !asked.IsZero() && !Behind(asked, waits)
}

// giveFor is what h is to asker, which needs its room.
func giveFor(h Holder, asker catalog.Model) give {
	if h.Model == asker.Name {
		return keep
	}
	if asker.ClassOrDefault() == catalog.ClassCritical && h.Class == catalog.ClassOpportunistic {
		return idleGive // as before: a critical model's room comes first
	}
	if h.Class == catalog.ClassCritical || h.Min > 0 {
		return keep
	}
	if !h.KeptUntil.IsZero() {
		return residentGive
	}
	switch {
	case h.Busy && h.Behind:
		return drainGive
	case h.Busy:
		return busyGive
	}
	return idleGive
}

// Waited are the holders of hs asker waits on that are another model's
// requests asked before asker's oldest waiting one to answer (busyGive,
// Ahead): ready and answering them, or starting for them. Those are let
// end first; a request asked after asker's is to take none of them
// (Owed). Taken as it becomes ready, a replica started for a request
// asked before asker's answered the requests of its model asked after it
// too, and asker waited for them. A replica of a model asked for only
// after asker (one that took room asker could spare) is not among them:
// it answers its own model's requests, all behind asker's, until asker
// needs its room.
func Waited(hs []Holder, asker catalog.Model) []string {
	var out []string
	for _, h := range hs {
		if h.Ahead && giveFor(h, asker) == busyGive {
			out = append(out, h.ID)
		}
	}
	return out
}

// Reclaimable is whether h would be given back now for a model that needs
// its room: what a node could hold once idle on-demand replicas go.
func Reclaimable(h Holder) bool { return giveFor(h, catalog.Model{}) == idleGive }

// Victims are the holders to give back so that have, with what they hold,
// reaches need: of those that may go for asker (idle on demand, or behind
// it), idle before busy, opportunistic before standard, then the least
// recently used first, as few as will do. ok is false when all of them
// would not do. all is what every holder that may go for asker holds,
// the busy ones (given back once idle) and those kept for their
// residency (once it ends) with the rest: whether waiting helps.
func Victims(hs []Holder, asker catalog.Model, have, need int64) (out []Holder, all int64, ok bool) {
	var givable, later int64
	var cands []Holder
	for _, h := range hs {
		switch giveFor(h, asker) {
		case idleGive, drainGive:
			givable += h.Held
			cands = append(cands, h)
		case busyGive, residentGive:
			later += h.Held
		}
	}
	if have+givable < need {
		return nil, givable + later, false
	}
	slices.SortStableFunc(cands, func(x, y Holder) int {
		return cmp.Or(cmp.Compare(boolRank(x.Busy), boolRank(y.Busy)), cmp.Compare(classOrder(x.Class), classOrder(y.Class)),
			x.LastUsed.Compare(y.LastUsed), compareIDs(x.ID, y.ID))
	})
	for _, h := range cands {
		if have >= need {
			break
		}
		out = append(out, h)
		have += h.Held
	}
	return out, givable + later, true
}

func classOrder(class string) int {
	if class == catalog.ClassOpportunistic {
		return 0
	}
	return 1
}

// Residing says what of hs keeps the room asker waits for for its residency,
// as of now: "alpha-1 is kept 4s more after its load (residency)", and
// when the first such residency ends, when the fleet is to look again;
// "" and the zero time when none is kept so.
func Residing(hs []Holder, asker catalog.Model, now time.Time) (why string, until time.Time) {
	var kept []string
	for _, h := range hs {
		if giveFor(h, asker) != residentGive {
			continue
		}
		kept = append(kept, fmt.Sprintf("%s is kept %s more after its load", h.ID, words.Span(ceilSecond(h.KeptUntil.Sub(now)))))
		if until.IsZero() || h.KeptUntil.Before(until) {
			until = h.KeptUntil
		}
	}
	if len(kept) == 0 {
		return "", time.Time{}
	}
	return strings.Join(kept, ", ") + " (residency)", until
}

// ceilSecond is d rounded up to a whole second: a wait said or asked
// for (Retry-After) is never shorter than the one there is.
func ceilSecond(d time.Duration) time.Duration {
	return (d + time.Second - 1).Truncate(time.Second)
}

// GiveBackWhy is why h is given back for asker, as the replica's detail
// and its model's last stop say it, and the reason it is counted under
// (Eviction): "swap" (idle, for another model) or "critical" (for a
// critical model).
func GiveBackWhy(h Holder, asker catalog.Model, now time.Time) (reason, why string) {
	if asker.ClassOrDefault() == catalog.ClassCritical && h.Class == catalog.ClassOpportunistic {
		return "critical", fmt.Sprintf("stopped to make room for %s, a critical model", asker.Name)
	}
	if h.Busy {
		why = "given back for " + asker.Name + " once the answers it has end"
		if h.Resided > 0 {
			why += ", after its " + words.Span(h.Resided) + " residency"
		}
		return "swap", why
	}
	why = "given back for " + asker.Name + ", idle"
	if !h.LastUsed.IsZero() {
		why += " for " + words.Span(now.Sub(h.LastUsed))
	}
	if h.Resided > 0 {
		why += ", after its " + words.Span(h.Resided) + " residency"
	}
	return "swap", why
}

// holderLocked is r as the swap rule sees it, for m: nil for one that is
// never given back (stopping, gone, or of a model the fleet forgot).
func (f *Fleet) holderLocked(r *replica, m catalog.Model, held int64, now time.Time) *Holder {
	st := f.models[r.model]
	if r.stopping || r.released || st == nil {
		return nil
	}
	d, _ := f.demands.Of(r.model)
	o := f.seenLocked(r)
	h := &Holder{ID: r.id, Model: r.model, Class: st.class, Min: st.min, Held: held, Ready: o.State == Ready,
		Busy: o.State != Ready || f.drains.Holds(r.id) > 0 || d.Asked > 0, Answering: f.drains.Holds(r.id), LastUsed: f.lastUsedLocked(r)}
	h.Place(f.askedAtLocked(r.model), f.askedAtLocked(m.Name))
	h.Reside(o.ReadyAt, o.ReadyAt.Sub(o.Started), f.drains.UsedAt(r.id), f.opts.Residency, now)
	return h
}

// giveLocked is what r is to m, which needs its room.
func (f *Fleet) giveLocked(r *replica, m catalog.Model, now time.Time) give {
	h := f.holderLocked(r, m, r.memBytes, now)
	if h == nil {
		return keep
	}
	return giveFor(*h, m)
}

// lastUsedLocked is when r's model was last asked for: the zero time when
// it has not been since its demand was forgotten.
func (f *Fleet) lastUsedLocked(r *replica) time.Time {
	d, _ := f.demands.Of(r.model)
	return d.LastUse
}

// giveBackLocked retires r for m, saying why, counts it, and forgets what
// was asked of r's model: it wants no replica again until it is asked for
// again, or two models would take the room from each other for ever.
func (f *Fleet) giveBackLocked(r *replica, m catalog.Model, now time.Time) {
	h := f.holderLocked(r, m, r.memBytes, now)
	if h == nil {
		return
	}
	reason, why := GiveBackWhy(*h, m, now)
	if d, _ := f.demands.Of(r.model); f.drains.Holds(r.id) == 0 && d.Asked == 0 {
		f.demands.Forget(r.model)
	}
	// Given back busy, its model keeps its requests' place: they came
	// after m's, and before those asked since.
	f.stopLocked(r, why)
	r.evictedFor = m.Name
	if st := f.models[r.model]; st != nil {
		st.lastStop = GivenBack{Replica: r.id, For: m.Name, Why: why, At: now}
	}
	f.countEvictionLocked(r.model, reason)
}

// GivenBack is the last replica of a model given back to make room for
// another: which, for which model, why (GiveBackWhy) and when.
type GivenBack struct {
	Replica, For, Why string
	At                time.Time
}

// Tell says g in h (LastStop and its model and time); nothing for none.
func (g GivenBack) Tell(h *ModelHealth) {
	if g.Replica == "" {
		return
	}
	h.LastStop, h.LastStopFor, h.LastStopAt = g.Replica+": "+g.Why, g.For, g.At
}

// Eviction counts the replicas of a model given back to make room, by why:
// "swap" (idle, for another model) or "critical" (for a critical model).
type Eviction struct {
	Model, Reason string
	Count         int
}

func (f *Fleet) countEvictionLocked(model, reason string) {
	if f.evictions == nil {
		f.evictions = map[[2]string]int{}
	}
	f.evictions[[2]string{model, reason}]++
}

// Evictions are the replicas given back to make room since the fleet was
// made, by model and why, for /metrics.
func (f *Fleet) Evictions() []Eviction {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Eviction, 0, len(f.evictions))
	for k, n := range f.evictions {
		out = append(out, Eviction{Model: k[0], Reason: k[1], Count: n})
	}
	slices.SortFunc(out, func(a, b Eviction) int { return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.Reason, b.Reason)) })
	return out
}

// waitingLocked is whether a model waits for a busy replica to fall idle
// and give back its room: a request ending is then a reason to look.
func (f *Fleet) waitingLocked() bool {
	for _, st := range f.models {
		if st.waitsForIdle {
			return true
		}
	}
	return false
}

// claims are the room the models placed earlier in a reconciling pass,
// which wait for room, keep from the models after them (Spare), by node
// name. The pass makes them afresh each time, in the models' order.
type claims map[string]*claim

// claim is the room one node keeps so: bytes of RAM, or cards by class,
// and who keeps it, the first asked first.
type claim struct {
	bytes int64
	cards map[string]int64
	by    []string
}

// of is what c keeps of what p needs on the node: cards of p's class for
// a profile on cards, else bytes of RAM.
func (c *claim) of(p catalog.Profile) int64 {
	if p.GPUClass != "" {
		return c.cardsOf(p.GPUClass)
	}
	return c.ram()
}

// ram is the node's RAM c keeps.
func (c *claim) ram() int64 {
	if c == nil {
		return 0
	}
	return c.bytes
}

// cardsOf are the node's cards of class c keeps.
func (c *claim) cardsOf(class string) int64 {
	if c == nil {
		return 0
	}
	return c.cards[class]
}

// keep keeps amount of what p needs on node for m, from the models after
// it in the pass.
func (cs claims) keep(node string, p catalog.Profile, m catalog.Model, amount int64) {
	if amount <= 0 || cs == nil {
		return
	}
	c := cs[node]
	if c == nil {
		c = &claim{cards: map[string]int64{}}
		cs[node] = c
	}
	if p.GPUClass != "" {
		c.cards[p.GPUClass] += amount
	} else {
		c.bytes += amount
	}
	if !slices.Contains(c.by, m.Name) {
		c.by = append(c.by, m.Name)
	}
}

// line says, after a node's line in a placement text, what of the room p
// needs c keeps: "" when none.
func (c *claim) line(p catalog.Profile) string {
	k := c.of(p)
	if k <= 0 {
		return ""
	}
	what := words.Size(k) + " of the room is"
	if p.GPUClass != "" {
		what = words.Count(int(k), "card is", "cards are")
	}
	return fmt.Sprintf("; %s kept for %s", what, c.keptFor())
}

// keptFor says who keeps c's room.
func (c *claim) keptFor() string {
	return strings.Join(c.by, ", ") + ", asked for before it"
}

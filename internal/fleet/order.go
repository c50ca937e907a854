package fleet

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"modelserve/catalog"
)

// Who was first: requests waiting for memory are served in the order they
// came, across models. A model's place is its oldest unanswered request,
// not its latest, nor when the fleet first heard of it: a model asked for
// again and again keeps no place its new requests did not earn, and one
// whose replica was given back while it still had requests keeps the
// place of those. Both fleets keep each model's Asks and ask Behind.

// Asks are when a model's unanswered requests were asked, oldest first.
// They are as many as the requests in flight for the model, which the
// gateway bounds.
type Asks struct{ at []time.Time }

// Add counts a request asked at t. Requests are mostly added in the order
// they came, so t is mostly the newest; one that took longer to reach the
// fleet than a later one (its body was slower to read) is put in its
// place.
func (a *Asks) Add(t time.Time) {
	if n := len(a.at); n == 0 || !t.Before(a.at[n-1]) {
		a.at = append(a.at, t)
		return
	}
	i, _ := slices.BinarySearchFunc(a.at, t, time.Time.Compare)
	a.at = slices.Insert(a.at, i, t)
}

// Done forgets the request asked at t: it has been answered, or its client
// went away.
func (a *Asks) Done(t time.Time) {
	i, ok := slices.BinarySearchFunc(a.at, t, time.Time.Compare)
	if ok {
		a.at = slices.Delete(a.at, i, i+1)
	}
}

// Len is how many requests are unanswered.
func (a *Asks) Len() int { return len(a.at) }

// Oldest is when the oldest unanswered request was asked: the zero time
// when none is.
func (a *Asks) Oldest() time.Time {
	if len(a.at) == 0 {
		return time.Time{}
	}
	return a.at[0]
}

// Behind is whether a model whose oldest unanswered request was asked at
// held is behind one whose oldest waiting request was asked at waits: all
// of its requests came after, so its busy replica is given back for the
// waiting one once the answers it has end, and the rest of its requests
// wait their turn. A model with none unanswered is behind any waiting one;
// nobody is behind a model with none waiting. Equal times keep the
// replica that serves.
func Behind(held, waits time.Time) bool {
	return !waits.IsZero() && (held.IsZero() || held.After(waits))
}

// First orders two models by their oldest unanswered requests (Asks.Oldest),
// the first asked first; a model with none comes before every waiting one,
// as one kept by its Scaling.Min, which nobody needs to ask for.
func First(a, b time.Time) int { return a.Compare(b) }

// A busy replica that a model waiting for room waits on takes no new
// request asked after that model's oldest waiting one. It is given back
// for the waiting model once the requests asked before the waiting one's
// are answered (swap.go); a later request that took a hold on it in the
// moment between the last of those answers ending and the fleet's next
// look would have the replica drain for that request's whole answer, and
// the waiting model wait past its turn. The later request waits its own
// turn instead: it keeps its place in the gateway's queue, and its model
// its place for its next replica. Both fleets keep an Owed and ask it in
// Hold.

// Owed are the replicas the models waiting for room wait on (Waited),
// with when each model's oldest waiting request was asked. The zero Owed
// owes nothing.
type Owed struct{ by map[string]owing }

// owing is what one waiting model waits on.
type owing struct {
	asked time.Time
	ids   []string
}

// Owe says model, whose oldest waiting request was asked at asked, waits
// on the replicas ids (none: on nothing), in place of what it waited on
// before.
func (o *Owed) Owe(model string, asked time.Time, ids []string) {
	if len(ids) == 0 {
		delete(o.by, model)
		return
	}
	if o.by == nil {
		o.by = map[string]owing{}
	}
	o.by[model] = owing{asked: asked, ids: ids}
}

// Refuses is whether a request asked at asked is to take no hold on
// replica id: a model whose oldest waiting request was asked before it
// waits on id, and the request is behind that model (Behind).
func (o *Owed) Refuses(id string, asked time.Time) bool {
	for _, w := range o.by {
		if Behind(asked, w.asked) && slices.Contains(w.ids, id) {
			return true
		}
	}
	return false
}

// classRank orders the models for placement: the critical first, since
// they may take room from others, the opportunistic last.
func classRank(m catalog.Model) int {
	switch m.ClassOrDefault() {
	case catalog.ClassCritical:
		return 0
	case catalog.ClassOpportunistic:
		return 2
	}
	return 1
}

// Turn orders two models that want room as the fleets place them: the
// critical first, since they may take room from others, the
// opportunistic last, and within a class the first asked first (First),
// given the oldest unanswered requests of each (aAsked, bAsked).
func Turn(a, b catalog.Model, aAsked, bAsked time.Time) int {
	return cmp.Or(cmp.Compare(classRank(a), classRank(b)), First(aAsked, bAsked), strings.Compare(a.Name, b.Name))
}

// Room that comes free while a model asked for first still waits for a
// busy replica's room goes to the first asked too: a model asked for
// later, smaller, that fits in it now, would otherwise hold it when the
// busy replica falls idle, and the first would wait for the later one's
// answers as well. A later model takes such room only when taking it
// cannot put off the first one's start, as a scheduler backfills: the
// first starts once enough of the busy replicas holding its room have
// given it back, whichever fall idle first, and what it would then have
// beyond its need is room it never needs. Both fleets ask Spare.

// maxSpareHolders bounds the busy holders Spare weighs one against
// another; beyond it, none of the room is spare.
const maxSpareHolders = 16

// Spare is how much of the room a waiting model has now (free, stopping
// for it, or to be given back for it at once) a model asked for after it
// may take without putting off its start, when it needs need and later
// are what each busy replica it waits for holds of what it needs. With
// now enough, what is beyond need is spare; else the least by which any
// set of later replicas that gives back enough overshoots it, whichever
// fall idle first. When later can never give back enough, all of now is
// spare: the waiting model does not start on this room.
func Spare(now, need int64, later []int64) int64 {
	if now >= need {
		return now - need
	}
	short := need - now
	if len(later) > maxSpareHolders {
		return 0
	}
	over := int64(-1)
	for set := 1; set < 1<<len(later); set++ {
		var sum int64
		for i, held := range later {
			if set&(1<<i) != 0 {
				sum += held
			}
		}
		if sum >= short && (over < 0 || sum-short < over) {
			over = sum - short
		}
	}
	if over < 0 {
		return max(now, 0)
	}
	return max(min(over, now), 0)
}

// Kept is the room the models earlier in a pass keep from those after
// them (Spare), by node: the local fleet's claims, for the Kubernetes
// fleet to keep and to say in the same words. The zero Kept keeps
// nothing.
type Kept struct{ cs claims }

// Keep keeps amount of what p needs on node for m from the models after
// it in the pass.
func (k *Kept) Keep(node string, p catalog.Profile, m catalog.Model, amount int64) {
	if k.cs == nil {
		k.cs = claims{}
	}
	k.cs.keep(node, p, m, amount)
}

// Of is what is kept on node of what p needs: cards of p's class for a
// profile on cards, else bytes of RAM.
func (k *Kept) Of(node string, p catalog.Profile) int64 { return k.cs[node].of(p) }

// RAM is the RAM kept on node, which a profile on cards needs some of
// too.
func (k *Kept) RAM(node string) int64 { return k.cs[node].ram() }

// Line says, after what a placement text says of node, what of the room
// p needs is kept there, and for whom: "; 1 GB of the room is kept for
// beta, asked for before it", or "" when none is.
func (k *Kept) Line(node string, p catalog.Profile) string { return k.cs[node].line(p) }

// For says who keeps node's room: "beta, asked for before it"; "" when
// nobody does.
func (k *Kept) For(node string) string {
	if c := k.cs[node]; c != nil {
		return c.keptFor()
	}
	return ""
}

// Keeps is what of the room it has now on a node a model keeps from the
// models after it while it waits for busy holders to fall idle: all but
// what it can Spare. have is the node's free room less what models before
// it keep (claimed), which is counted as given back once they are done
// with it; hs are the node's holders as the swap rule sees them for
// asker, those it would give back now adding to what it has now, the busy
// ones giving theirs back later. stopping are what replicas given back
// for models asked for before asker hold, each: theirs once those are
// done with it too. Both fleets ask Keeps, so that they keep the same.
func Keeps(hs []Holder, asker catalog.Model, have, claimed, need int64, stopping ...int64) int64 {
	now := have
	var later []int64
	if claimed > 0 {
		later = append(later, claimed)
	}
	later = append(later, stopping...)
	for _, h := range hs {
		switch giveFor(h, asker) {
		case idleGive, drainGive:
			now += h.Held
		case busyGive, residentGive:
			later = append(later, h.Held)
		}
	}
	return now - Spare(now, need, later)
}

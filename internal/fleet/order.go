package fleet

import (
	"slices"
	"time"
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

// Add counts a request asked at t. Requests are added in the order they
// came (under the fleet's lock), so t is the newest; one out of order is
// put in its place.
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

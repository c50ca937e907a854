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

package gateway

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"modelserve/catalog"
	"modelserve/internal/fleet"
)

// pool is what the gateway knows of one model's replicas beyond what the
// fleet says: the requests it has in flight on each (exact and immediate,
// where the engine's own figures are up to a couple of seconds old), the
// requests waiting for a slot, and the replicas that failed a request a
// moment ago.
type pool struct {
	mu       sync.Mutex
	inFlight map[string]int       // by replica id
	failed   map[string]time.Time // until when a replica is avoided
	// ready are the model's ready replicas as last read from the fleet
	// (read), by whichever request or fleet's word read them: every
	// waiter is given a slot from these, so one that came later and read
	// a replica just ready never goes before one that waited for it with
	// an older reading. serving reads them, without p.mu (read).
	ready   []fleet.Replica
	serving func() []fleet.Replica
	// readings numbers the readings of serving as they begin, and kept
	// is the number of the one ready holds: a reading that ends after a
	// newer one is dropped, so ready never goes back to an older one.
	readings, kept uint64
	// queue are the requests waiting for a slot, in the order they came:
	// a slot that frees is given to the first of them that may take it,
	// by the request that freed it, so none waits on a timer and none
	// that came later goes before.
	queue []*waiter
	seq   uint64 // of the last waiter queued
	// wake is closed, and replaced, when the fleet says a replica became
	// ready: every waiter reads the ready replicas again.
	wake chan struct{}
	// coldSince is when the model was first asked for with no replica
	// ready; zero when one is ready.
	coldSince time.Time
	// Requests handed slots go on to their replicas in the order they
	// were handed them (turns), not in the order their goroutines happen
	// to run: a replica is sent two requests at once (its slot and its
	// engine's queue), and its engine serves first the one that reaches
	// it first. One handed its slot by its own grant ran on at once while
	// the waiter ahead of it, handed a slot in the same grant, was still
	// being woken; it reached the engine first, and the one that had
	// waited longer waited for its answer too. A request handed a free
	// slot as it comes, with nobody waiting and none ahead of it, takes
	// no turn (0): it has nobody to wait for, and the turns cost it
	// nothing. A request waits only for those going to its own replica,
	// and for turnWait at most: one whose engine is slow to take the
	// connection (a node gone, its address not answering) holds up no
	// other replica's, and its own for a moment only.
	turns  uint64        // the last turn given
	ahead  []turn        // turns given and not yet gone, in order
	passed chan struct{} // closed when a turn goes; made by the first to wait for one
	// turnWait is how long a request waits at most for those handed
	// slots on its replica before it to go on: a woken waiter runs within
	// microseconds, a connection to an engine is made within a
	// millisecond.
	turnWait time.Duration
	// clock is the gateway's (Options.Clock): when a failed replica is
	// offered again, and the bound of turnWait.
	clock clock.Clock
}

// newPool is the pool of a model whose ready replicas serving reads (nil:
// none is ever read, for tests of the choice alone), on clk.
func newPool(serving func() []fleet.Replica, clk clock.Clock) *pool {
	return &pool{inFlight: map[string]int{}, failed: map[string]time.Time{}, wake: make(chan struct{}),
		turnWait: 100 * time.Millisecond, serving: serving, clock: clk}
}

// read reads the model's ready replicas from the fleet, keeps them as the
// pool's, and says them (the newest reading, which may be another
// request's begun after this one).
//
// The fleet is read without p.mu: the fleet's lock is also the console's
// (every watcher of the fleet and catalog pages reads each model's health
// under it), and a request that waited for it while holding p.mu held up
// every request of the model behind it, the one giving back its slot
// too, so the engine sat idle while the console was drawn.
func (p *pool) read() []fleet.Replica {
	p.mu.Lock()
	if p.serving == nil {
		defer p.mu.Unlock()
		return p.ready
	}
	p.readings++
	n := p.readings
	p.mu.Unlock()
	rs := p.serving()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keep(n, rs)
	return p.ready
}

// readLocked is read with p.mu held throughout: for the fleet's word that
// a replica became ready, which every waiter must see before it is woken.
func (p *pool) readLocked() []fleet.Replica {
	if p.serving != nil {
		p.readings++
		p.keep(p.readings, p.serving())
	}
	return p.ready
}

// keep makes rs, the reading numbered n, the pool's ready replicas unless
// a newer reading is kept already. p.mu is held.
func (p *pool) keep(n uint64, rs []fleet.Replica) {
	if n > p.kept {
		p.ready, p.kept = rs, n
	}
}

// slotsOf is how many requests a replica's engine serves at once (its
// --parallel, read from /slots); 1 when not known yet.
func slotsOf(r fleet.Replica) int {
	if r.Load != nil && r.Load.Size.Slots > 0 {
		return r.Load.Size.Slots
	}
	return 1
}

// depthOf is how many requests the gateway sends a replica at once
// (catalog.Depth).
func depthOf(r fleet.Replica) int { return catalog.Depth(slotsOf(r)) }

// loadOf is how busy a replica is: the gateway's own requests on it, or
// what its engine last said it serves and holds back, whichever is more.
// The engine's figure counts requests that did not come through the
// gateway (a job's smoke test); the gateway's counts those sent since the
// engine last said.
func (p *pool) loadOf(r fleet.Replica) int {
	n := p.inFlight[r.ID]
	if r.Load != nil {
		n = max(n, r.Load.Processing+r.Load.Deferred)
	}
	return n
}

// affinityLoad is how far above the average a replica may be loaded and
// still take the requests whose prefix hashes to it: the bound of
// consistent hashing with bounded loads (Mirrokni, Thorup and
// Zadimoghaddam). 1.5 keeps a tenant on its replica through ordinary
// unevenness, and moves it when its replica is clearly the busiest; at
// 1.25, with sixteen tenants on four one-slot replicas four at a time,
// one request in six went elsewhere and read its prefix again.
const affinityLoad = 1.5

// affinitySlack is how many requests past affinityLoad's bound a replica
// may hold and still take a prefix's requests: a request waits behind one
// more on the engine that holds its prefix rather than read it again on
// another. At the few requests at once of a small pool the average is
// under one a replica, and the bound alone moved a tenant whenever its
// replica had one request running and one waiting: sixteen tenants on
// four one-slot replicas, four at a time, reused 90% of what an oracle
// would with caches of any size, and 100% with the slack.
const affinitySlack = 1

// pick chooses a replica with a free slot for a request whose prompt prefix
// hashes to key (0: no prefix worth keeping together), or says there is
// none. Replicas that failed a moment ago are avoided while another can
// serve.
//
// With a key, replicas are ranked by rendezvous hashing (the highest
// hash of key and replica id first: adding or losing a replica moves only
// the prefixes that were its), and the first whose load stays within the
// bound takes it, waiting for a slot there when it has none free, so one
// conversation or one system prompt keeps landing on the engine that has
// it cached. Without one, or when every ranked replica is over the bound,
// the least loaded for its slots does.
func (p *pool) pick(rs []fleet.Replica, key uint64, now time.Time) (fleet.Replica, bool) {
	c, ok := p.choose(rs, key, now, false)
	return c.replica, ok
}

// choice is a routing decision: the replica, why it, and what it was
// chosen among, for the request's trace.
type choice struct {
	replica fleet.Replica
	// why is "prefix owner" (the first in the key's ranking within the
	// load bound), "least loaded" or "only replica".
	why string
	// load is the chosen replica's load as it was chosen; loads, when
	// asked for, every candidate's ("id load/depth"); cooling the
	// replicas passed over for having failed a moment ago.
	load    int
	loads   []string
	cooling []string
	// turn is the request's turn to go on to the replica (pool.hand).
	turn uint64
}

// Why a replica was chosen.
const (
	byPrefix    = "prefix owner"
	byLoad      = "least loaded"
	onlyReplica = "only replica"
)

// choose is pick, saying why; with explain, each candidate's load too.
func (p *pool) choose(rs []fleet.Replica, key uint64, now time.Time, explain bool) (choice, bool) {
	var c choice
	for id, until := range p.failed {
		if now.After(until) {
			delete(p.failed, id)
		}
	}
	if len(p.failed) > 0 {
		healthy := make([]fleet.Replica, 0, len(rs))
		for _, r := range rs {
			if _, bad := p.failed[r.ID]; !bad {
				healthy = append(healthy, r)
			} else if explain {
				c.cooling = append(c.cooling, r.ID)
			}
		}
		if len(healthy) > 0 {
			rs = healthy
		} else {
			c.cooling = nil
		}
	}
	if explain {
		for _, r := range rs {
			c.loads = append(c.loads, r.ID+" "+strconv.Itoa(p.loadOf(r))+"/"+strconv.Itoa(depthOf(r)))
		}
	}
	chosen := func(r fleet.Replica, why string) (choice, bool) {
		if len(rs) == 1 {
			why = onlyReplica
		}
		c.replica, c.why, c.load = r, why, p.loadOf(r)
		return c, true
	}
	total := 0
	for _, r := range rs {
		total += p.loadOf(r)
	}
	if key != 0 && len(rs) > 1 {
		// The first replica in the key's ranking whose load stays within
		// the bound is the request's, free or not: a busy one within the
		// bound is waited for (admit queues the request until a slot
		// frees), since its engine holds the prefix; sending it to an
		// idle one instead would read the prefix again there, and at four
		// requests at once nearly every request did.
		bound := int(math.Ceil(affinityLoad*float64(total+1)/float64(len(rs)))) + affinitySlack
		ranked := slices.Clone(rs)
		slices.SortFunc(ranked, func(a, b fleet.Replica) int {
			return cmp.Compare(rendezvous(key, b.ID), rendezvous(key, a.ID))
		})
		for _, r := range ranked {
			if p.loadOf(r)+1 <= bound {
				if p.inFlight[r.ID] < depthOf(r) {
					return chosen(r, byPrefix)
				}
				return choice{}, false
			}
		}
	}
	// The least loaded of those with room, the first of equals: no list
	// of them is made, which was most of what a request allocated here.
	var best fleet.Replica
	found := false
	for _, r := range rs {
		if p.inFlight[r.ID] < depthOf(r) && (!found || p.lessLoaded(r, best, key)) {
			best, found = r, true
		}
	}
	if !found {
		return choice{}, false
	}
	return chosen(best, byLoad)
}

// lessLoaded is whether a is to take a request before b: less load per
// slot (compared without division: a/sa < b/sb), then more free slots,
// then the higher rank for key.
func (p *pool) lessLoaded(a, b fleet.Replica, key uint64) bool {
	return cmp.Or(cmp.Compare(p.loadOf(a)*slotsOf(b), p.loadOf(b)*slotsOf(a)),
		cmp.Compare(slotsOf(b)-p.loadOf(b), slotsOf(a)-p.loadOf(a)),
		cmp.Compare(rendezvous(key, b.ID), rendezvous(key, a.ID))) < 0
}

// take counts a request sent to replica id.
func (p *pool) take(id string) { p.inFlight[id]++ }

// turn is a request's turn to go on to its replica.
type turn struct {
	n       uint64
	replica string // id
}

// hand takes c's slot for a request and, numbered, gives the request its
// turn to go on to the replica (goes). p.mu is held.
func (p *pool) hand(c *choice, numbered bool) {
	p.take(c.replica.ID)
	if numbered {
		p.turns++
		c.turn = p.turns
		p.ahead = append(p.ahead, turn{c.turn, c.replica.ID})
	}
}

// goes waits until the requests handed slots on replica before the one
// whose turn is n have gone on to it (or given their slots back), or
// p.turnWait passed.
func (p *pool) goes(n uint64, replica string) {
	if n == 0 {
		return
	}
	var bound clock.Timer
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.behind(n, replica) {
		if p.passed == nil {
			p.passed = make(chan struct{})
		}
		passed := p.passed
		p.mu.Unlock()
		if bound == nil {
			bound = p.clock.NewTimer(p.turnWait)
			defer bound.Stop()
		}
		select {
		case <-passed:
		case <-bound.C():
			p.mu.Lock()
			return
		}
		p.mu.Lock()
	}
}

// behind is whether a turn before n on replica has yet to go. p.mu is
// held.
func (p *pool) behind(n uint64, replica string) bool {
	for _, t := range p.ahead {
		if t.n >= n {
			return false
		}
		if t.replica == replica {
			return true
		}
	}
	return false
}

// gone says the request whose turn is n has gone on (or given its slot
// back): the next may go.
func (p *pool) gone(n uint64) {
	if n == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.goneLocked(n)
}

// goneLocked is gone with p.mu held.
func (p *pool) goneLocked(n uint64) {
	if i := slices.IndexFunc(p.ahead, func(t turn) bool { return t.n == n }); i >= 0 {
		p.ahead = slices.Delete(p.ahead, i, i+1)
		if p.passed != nil {
			close(p.passed)
			p.passed = nil
		}
	}
}

// give counts a request to replica id done, marking the replica when it
// failed, and hands the free slot to the first waiter that may take it.
func (p *pool) give(id string, failedUntil time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inFlight[id]--; p.inFlight[id] <= 0 {
		delete(p.inFlight, id)
	}
	if !failedUntil.IsZero() {
		p.failed[id] = failedUntil
	}
	p.grant(p.clock.Now())
}

// waiter is a request waiting for a slot: the prefix key it is picked
// with, the replicas that failed it already (avoid) and since when it
// waits, and where it is handed the choice of the replica whose slot it
// was given (taken for it already). explain asks the choice to say every
// candidate's load, for a traced request.
type waiter struct {
	seq     uint64
	key     uint64
	avoid   []fleet.Replica
	began   time.Time
	explain bool
	// turned is the replica on which the fleet last refused w a hold
	// (Fleet.Hold), at turnedAway: one it may still call ready, kept for a
	// model asked for before w, which waits for its room. It is not
	// offered to w again for turnedAwayFor.
	turned     fleet.Replica
	turnedAway time.Time
	// got is made when the waiter first queues (nil before: nothing is
	// handed to it), buffered, and holds one choice at most: a waiter is
	// handed one only while queued, and leaves the queue as it is.
	got chan choice
}

func newWaiter(key uint64, avoid []fleet.Replica, began time.Time, explain bool) *waiter {
	return &waiter{key: key, avoid: avoid, began: began, explain: explain}
}

// offer is which of ready w may go to: those but the replicas that
// failed it, and the one that turned it away a moment ago
// (turnedAwayFor); the fleet still calling one that failed it ready a
// while later (an engine that was not yet listening when its pod turned
// ready) offers it once more rather than keep the request waiting for
// another that may never come.
func (w *waiter) offer(ready []fleet.Replica, now time.Time) []fleet.Replica {
	if w.justTurnedAway(now) {
		ready = without(ready, []fleet.Replica{w.turned})
	}
	if others := without(ready, w.avoid); len(others) > 0 || now.Sub(w.began) < reofferAfter {
		return others
	}
	return ready
}

// justTurnedAway is whether the fleet refused w a hold less than
// turnedAwayFor before now.
func (w *waiter) justTurnedAway(now time.Time) bool {
	return !w.turnedAway.IsZero() && now.Sub(w.turnedAway) < turnedAwayFor
}

// enqueue puts w in the queue in its place by arrival (a waiter whose
// replica was retired under it goes back where it was), and gives out
// what slots are free among the pool's ready replicas. It says the
// replica w was given, if any: now, or while it was away from the queue
// (woken, reading the replicas again). p.mu is held.
func (p *pool) enqueue(w *waiter, now time.Time) (choice, bool) {
	if w.seq == 0 {
		// Its place by arrival, kept should it come back (a replica
		// retired or gone under it).
		p.seq++
		w.seq = p.seq
	}
	if w.got == nil {
		if len(p.queue) == 0 {
			// Nobody waits: a free slot is the request's at once, with no
			// place in the queue to take and leave, and a turn only when
			// others handed slots have yet to go.
			if c, ok := p.choose(w.offer(p.ready, now), w.key, now, w.explain); ok {
				p.hand(&c, len(p.ahead) > 0)
				return c, true
			}
		}
		w.got = make(chan choice, 1)
	}
	select {
	case c := <-w.got:
		return c, true
	default:
	}
	if !slices.Contains(p.queue, w) {
		i, _ := slices.BinarySearchFunc(p.queue, w.seq, func(q *waiter, seq uint64) int { return cmp.Compare(q.seq, seq) })
		p.queue = slices.Insert(p.queue, i, w)
	}
	p.grant(now)
	select {
	case c := <-w.got:
		return c, true
	default:
		return choice{}, false
	}
}

// leave takes w out of the queue, and gives back a slot it was given
// meanwhile, to the next waiter.
func (p *pool) leave(w *waiter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queue = slices.DeleteFunc(p.queue, func(q *waiter) bool { return q == w })
	select {
	case c := <-w.got:
		id := c.replica.ID
		if p.inFlight[id]--; p.inFlight[id] <= 0 {
			delete(p.inFlight, id)
		}
		p.goneLocked(c.turn)
		p.grant(p.clock.Now())
	default:
	}
}

// grant gives free slots of the pool's ready replicas to the waiters in
// arrival order: each that pick finds a replica for is taken out of the
// queue and handed it. A waiter whose prefix keeps it on a busy replica
// is passed over, as it would be had it come alone. p.mu is held.
func (p *pool) grant(now time.Time) {
	for i := 0; i < len(p.queue); {
		if !p.roomIn(p.ready) {
			// Of the 60 waiting at 64 requests at once, nearly all wait
			// for a slot of any replica: none is looked at.
			return
		}
		w := p.queue[i]
		rs := w.offer(p.ready, now)
		if !p.roomIn(rs) {
			i++
			continue
		}
		c, ok := p.choose(rs, w.key, now, w.explain)
		if !ok {
			i++
			continue
		}
		p.hand(&c, true)
		p.queue = slices.Delete(p.queue, i, i+1)
		w.got <- c
	}
}

// roomIn is whether any of rs may be sent another request. p.mu is held.
func (p *pool) roomIn(rs []fleet.Replica) bool {
	for _, r := range rs {
		if p.inFlight[r.ID] < depthOf(r) {
			return true
		}
	}
	return false
}

// lookAgain reads the ready replicas again, as one became ready, and
// gives its slots to the waiters in arrival order; it wakes every waiter
// to look again besides (the first of a cold start sees it is over).
func (p *pool) lookAgain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.readLocked()
	p.grant(p.clock.Now())
	close(p.wake)
	p.wake = make(chan struct{})
}

// counts are the requests in flight and waiting.
func (p *pool) counts() (inFlight, waiting int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.inFlight {
		inFlight += n
	}
	return inFlight, len(p.queue)
}

// rendezvous is the rank of replica id for key: a hash of both, mixed so
// that close keys rank replicas independently.
func rendezvous(key uint64, id string) uint64 {
	return mix(key ^ fnv1a(id))
}

// fnv1a is the 64-bit FNV-1a hash of s, as hash/fnv's, without making a
// hasher for each replica ranked.
func fnv1a[T string | []byte](s T) uint64 {
	h := uint64(14695981039346656037)
	for i := range len(s) {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix is splitmix64's finaliser.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

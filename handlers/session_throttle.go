package handlers

import (
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Sign-in failures are counted per (name, address) and per address, never
// per name alone: counted per name, anyone who can reach the sign-in page
// could lock the operator out by guessing wrong five times, and an
// operator signing in from their own desk would be refused because a
// stranger somewhere else had guessed. A correct password from an address
// that has not failed is never refused.
//
// Past a few free failures a key waits before its next try, twice as long
// after each further failure (backoff), up to a ceiling: an operator who
// mistyped waits half a minute; a guesser is slowed to a handful of tries
// an hour per name and address. A key is forgotten an hour after its last
// failure. Kept in memory: a restart forgets, which only helps the
// operator.
const (
	// pairFree is how many failures a name may have from one address
	// before it waits.
	pairFree = 5
	// addrFree is how many failures, for any names, an address may have:
	// more than a name's, as several operators may share an address (an
	// office's NAT), but few enough that trying many names is slow.
	addrFree     = 10
	backoffFirst = 30 * time.Second
	backoffMost  = 15 * time.Minute
	forgetAfter  = time.Hour
	// maxThrottleKeys bounds the memory a flood of made-up names can take.
	maxThrottleKeys = 10000
)

// throttleKey is one counter, and how many failures it has free.
type throttleKey struct {
	id   string
	free int
}

// strikes are a key's failures: how many, and when the last was.
type strikes struct {
	n    int
	last time.Time
}

type throttle struct {
	mu    sync.Mutex
	fails map[string]strikes
	now   func() time.Time
}

func newThrottle() *throttle {
	return &throttle{fails: map[string]strikes{}, now: time.Now}
}

// signInKeys are the counters a sign-in touches: the name (in any case,
// as names compare) from this address, and the address. An IPv6 address
// counts as its /64, which one machine commonly has whole: counted one by
// one, each guess could come from a fresh address.
func signInKeys(name string, addr netip.Addr) []throttleKey {
	where := addr.String()
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		where = p.String()
	}
	return []throttleKey{
		{id: "pair:" + where + " " + strings.ToLower(name), free: pairFree},
		{id: "addr:" + where, free: addrFree},
	}
}

// backoff is the wait after a key's failures beyond its free ones.
func backoff(over int) time.Duration {
	if over >= 10 { // 30 s << 10 is well past the ceiling
		return backoffMost
	}
	return min(backoffFirst<<over, backoffMost)
}

// wait is how long until the keys may try again; 0 when they may now.
func (t *throttle) wait(keys []throttleKey) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	var longest time.Duration
	for _, k := range keys {
		s, ok := t.current(k.id, now)
		if !ok || s.n < k.free {
			continue
		}
		longest = max(longest, s.last.Add(backoff(s.n-k.free)).Sub(now))
	}
	return longest
}

// fail counts a failed sign-in against the keys.
func (t *throttle) fail(keys []throttleKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if len(t.fails) >= maxThrottleKeys {
		t.sweep(now)
	}
	for _, k := range keys {
		s, _ := t.current(k.id, now)
		t.fails[k.id] = strikes{n: s.n + 1, last: now}
	}
}

// reset forgets the failures of the keys, after a sign-in that worked.
func (t *throttle) reset(keys []throttleKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		delete(t.fails, k.id)
	}
}

// current is k's strikes unless forgotten; t.mu is held.
func (t *throttle) current(k string, now time.Time) (strikes, bool) {
	s, ok := t.fails[k]
	if ok && now.Sub(s.last) >= forgetAfter {
		delete(t.fails, k)
		return strikes{}, false
	}
	return s, ok
}

// sweep drops forgotten keys and, should the map still be full (a flood
// from very many addresses), a tenth of the rest; t.mu is held. Dropping
// some counts is better than growing without end: each address is still
// slowed by bcrypt and by its own counters.
func (t *throttle) sweep(now time.Time) {
	for k, s := range t.fails {
		if now.Sub(s.last) >= forgetAfter {
			delete(t.fails, k)
		}
	}
	for k := range t.fails {
		if len(t.fails) < maxThrottleKeys*9/10 {
			break
		}
		delete(t.fails, k)
	}
}

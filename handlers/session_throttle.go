package handlers

import (
	"net"
	"strings"
	"sync"
	"time"
)

// Sign-in attempts are counted per user name and per address: more than
// maxFailures failures within failureWindow, and that name (from anywhere)
// or that address (for any name) is refused until the oldest failure is
// older than the window, even with the right password. Guessing a password
// at five tries a quarter-hour is hopeless; an operator who mistyped waits
// a few minutes. Kept in memory: a restart forgets, which only helps the
// operator.
const (
	maxFailures   = 5
	failureWindow = 15 * time.Minute
	// maxThrottleKeys bounds the memory a flood of made-up names can take;
	// past it, keys whose failures have all expired are dropped.
	maxThrottleKeys = 10000
)

type throttle struct {
	mu    sync.Mutex
	fails map[string][]time.Time
	now   func() time.Time
}

func newThrottle() *throttle {
	return &throttle{fails: map[string][]time.Time{}, now: time.Now}
}

// signInKeys are the counters a sign-in touches: the name (in any case,
// as names compare) and the address it came from, without its port.
func signInKeys(name, remoteAddr string) []string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	return []string{"user:" + strings.ToLower(name), "addr:" + host}
}

// wait is how long until the keys may try again; 0 when they may now.
func (t *throttle) wait(keys []string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	var longest time.Duration
	for _, k := range keys {
		recent := t.recent(k, now)
		if len(recent) >= maxFailures {
			longest = max(longest, recent[len(recent)-maxFailures].Add(failureWindow).Sub(now))
		}
	}
	return longest
}

// fail counts a failed sign-in against the keys.
func (t *throttle) fail(keys []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if len(t.fails) >= maxThrottleKeys {
		for k := range t.fails {
			if len(t.recent(k, now)) == 0 {
				delete(t.fails, k)
			}
		}
	}
	for _, k := range keys {
		list := append(t.recent(k, now), now)
		// Only the last maxFailures decide anything.
		t.fails[k] = list[max(0, len(list)-maxFailures):]
	}
}

// reset forgets the failures of the keys, after a sign-in that worked.
func (t *throttle) reset(keys []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		delete(t.fails, k)
	}
}

// recent are k's failures within the window, oldest first; t.mu is held.
func (t *throttle) recent(k string, now time.Time) []time.Time {
	list := t.fails[k]
	i := 0
	for i < len(list) && now.Sub(list[i]) >= failureWindow {
		i++
	}
	if i == len(list) {
		delete(t.fails, k)
		return nil
	}
	list = list[i:]
	t.fails[k] = list
	return list
}

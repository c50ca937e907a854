package mirror

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// controller chooses how many connections a ranged fetch runs, one window
// (Options.RateWindow) at a time, from the total rate the last window
// measured. It starts from one connection, which is all a fast link needs
// (on it a second only adds the work of parts: a stream is as fast as the
// disk and the hash). It doubles the count while the rate nearly doubles
// with it, then adds one at a time while the rate still rises by a tenth
// (a third, from one to two: pays); when a connection more no longer pays,
// it goes back to the count before, and stays there a while (holdWindows,
// doubled each time one more fails to pay again).
// When the rate collapses or falls as the count rises (the CDN throttling
// every connection), it never again goes as high as that count, and tries
// next halfway between it and the best count seen: a throttle is found in
// a few windows, most of them at a good rate.
type controller struct {
	fixed    bool
	ceiling  int
	doubling bool
	prev     float64 // the rate of the last window
	prevN    int     // the count before the last change; 0: no change to judge
	best     float64
	bestN    int
	held     bool // adding stopped: the count stays
	// heldFor is the windows held since, holdFor how many before one
	// more is tried again: a window a busy machine paused, measured as
	// a connection that did not pay, would otherwise hold a paced CDN's
	// fetch at one connection to its end. It doubles each time.
	heldFor, holdFor int
	changed          bool // the count was just set to another: its first window
}

func newController(o Options, cap int) *controller {
	return &controller{fixed: o.Fixed, ceiling: cap, doubling: true}
}

// holdWindows is the fewest windows a count is held before one more
// connection is tried again: 8 s at the default window, so that on a link
// one stream fills the retries cost a window in sixteen at most.
const holdWindows = 16

// pays is how many times the rate of n connections the rate of the next
// count must be for the count to stay: a tenth more, but a third more for
// the step from one connection to two. That step is the one that brings the
// work of parts (a file written in two places, bytes ahead of the hash read
// back for it), and on a link one stream fills — or a machine it keeps busy
// — two measure within a busy machine's noise of one, which would pass a
// tenth half the time, and hold two where one is faster. A CDN that paces
// each connection gives nearly twice the rate for two.
func (c *controller) pays(n int) float64 {
	if n == 1 {
		return 1.3
	}
	return 1.1
}

// startConnections is the count a ranged fetch starts with.
func (m *Mirror) startConnections() int {
	if m.opts.Fixed {
		return m.opts.Connections
	}
	return 1
}

// early says whether the count n, whose rate so far in the window is rate,
// is to be judged before the window is over: a count just set that
// collapsed, or one just raised that made the total rate fall. The first
// count is judged over a whole window: its rate is what a second
// connection must beat by a third, and the first quarter of a fetch (the
// first request, a new file) often measured one stream well below its
// pace, so two looked faster than one when they were not. A connection
// still starting (its request, TCP's slow start) adds little in a quarter
// of a window, but takes nothing from the others; a fall means the
// connections are fighting over something (a CPU, on a fast link) or the
// CDN throttles them.
func (c *controller) early(n int, rate float64) bool {
	if c.fixed {
		return false
	}
	return c.bestN > 0 && c.changed && (rate < c.best/2 || (c.prevN > 0 && n > c.prevN && rate < c.prev))
}

// next is the count for the next window, given the count n of this one and
// its total rate.
func (c *controller) next(n int, rate float64) int {
	if c.fixed {
		return n
	}
	next := c.judge(n, rate)
	c.changed = next != n
	return next
}

func (c *controller) judge(n int, rate float64) int {
	if rate > c.best {
		c.best, c.bestN = rate, n
	}
	switch {
	case n > 1 && c.changed && (rate < c.best/2 || (c.prevN > 0 && n > c.prevN && rate < c.prev)):
		// Collapsed, or fell, as the count changed: more connections
		// than the CDN allows (or than the machine can feed). A rate
		// that falls while the count stays is the network's or the
		// machine's doing, and says nothing of the count.
		c.ceiling = max(1, min(c.ceiling, n-1))
		c.doubling, c.prevN, c.held = false, 0, false
		c.prev = rate
		return max(1, min(c.bestN+(c.ceiling-c.bestN+1)/2, c.ceiling))
	case c.prevN > 0 && rate < c.prev*c.pays(c.prevN):
		// The last connection added did not pay: back to the count before.
		back := c.prevN
		c.prevN, c.held, c.heldFor = 0, true, 0
		c.holdFor = max(holdWindows, 2*c.holdFor)
		c.prev = rate
		return back
	case c.held && n < c.ceiling && c.heldFor+1 >= c.holdFor:
		// Held long enough: one more connection is tried again, and
		// judged as any added one.
		c.held = false
		c.prevN, c.prev = n, rate
		return n + 1
	case c.held || n >= c.ceiling:
		c.heldFor++
		c.prevN = 0
		c.prev = rate
		return n
	}
	grow := n + 1
	if c.doubling && (c.prevN == 0 || rate >= c.prev*1.6) {
		grow = n * 2
	} else {
		c.doubling = false
	}
	c.prevN, c.prev = n, rate
	return min(grow, c.ceiling)
}

// control runs once a window: it measures each connection, takes the part
// of one far slower than the fastest (a stall on one connection, not the
// CDN's pace) for another to fetch again, and sets the count.
//
// It is called four times a window. Before the window is over it only
// looks (controller.early): a count just set whose rate fell or collapsed
// is judged after a quarter of one, so that a CDN's throttle costs a
// quarter of a window, not a whole one.
func (r *ranged) control(ctl *controller) {
	// The window as it was, not as it was meant to be: on a busy
	// machine a tick comes late, and its bytes are of a longer window.
	now := time.Now()
	elapsed := now.Sub(r.looked)
	if elapsed <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if elapsed < r.d.m.opts.RateWindow*9/10 {
		// A connection that ran a window before and brought nothing in
		// this one is paused (the machine, the disk, the hasher), not
		// throttled: a throttle slows every connection, it stops none.
		// Judged early, a pause cut the count to one for good.
		var total int64
		paused := false
		for c := range r.conns {
			b := c.window.Load()
			total += b
			paused = paused || (b == 0 && c.windows > 0 && !c.leaving)
		}
		if paused || r.liveLocked() < r.want || !ctl.early(r.want, float64(total)/elapsed.Seconds()) {
			return
		}
	}
	r.looked = now
	window := elapsed.Seconds()
	var total int64
	var rates []int64
	for c := range r.conns {
		b := c.window.Swap(0)
		c.last = b
		total += b
		c.windows++
		if c.windows >= 2 {
			rates = append(rates, b)
		}
	}
	rate := float64(total) / window
	if len(rates) > 0 {
		r.fastest = max(r.fastest*15/16, slices.Max(rates))
	} else {
		r.fastest = r.fastest * 15 / 16
	}
	// A connection is measured against the others running (their median:
	// a throttle that slows them all singles none out), or, with too few
	// others, against the fastest part lately.
	ref := r.fastest
	if len(rates) >= 3 {
		slices.Sort(rates)
		ref = rates[len(rates)/2]
	}
	for c := range r.conns {
		// Far slower than the fastest for a good while (five windows and
		// half a second at least): a pause of the rate cap or of the
		// CDN's pacing is not a stall.
		if c.last*10 < ref {
			c.slow++
		} else {
			c.slow = 0
		}
		slowFor := time.Duration(c.slow) * r.d.m.opts.RateWindow
		if c.slow >= 5 && slowFor >= 500*time.Millisecond && c.cancel != nil && !c.leaving {
			for _, p := range r.parts {
				if p.conn == c {
					p.gen++
					p.busy, p.conn = false, nil
				}
			}
			if r.filling == c {
				r.filling = nil // its bytes are read back, not waited for
			}
			c.cancel(errTaken)
			c.windows, c.slow = 0, 0
		}
	}
	// A window in which fewer connections ran than wanted (the tail of
	// the file) says nothing about the count.
	running := 0
	for c := range r.conns {
		if !c.leaving {
			running++
		}
	}
	if running < r.want {
		return
	}
	want := ctl.next(r.want, rate)
	r.want = want
	for _, c := range r.sheddableLocked() {
		if running <= want {
			break
		}
		c.leaving = true
		c.cancel(errShed)
		running--
	}
}

// sheddableLocked is the connections the controller may take away, the
// one whose part lies farthest into the file first: the one at the hash's
// edge stays, so that what it fetches is still hashed as it arrives and
// the prefix goes on growing.
func (r *ranged) sheddableLocked() []*conn {
	at := map[*conn]int64{}
	for _, p := range r.parts {
		if p.conn != nil {
			at[p.conn] = p.next
		}
	}
	var cs []*conn
	for c := range r.conns {
		if !c.leaving && c.cancel != nil {
			cs = append(cs, c)
		}
	}
	slices.SortFunc(cs, func(a, b *conn) int { return cmp.Compare(at[b], at[a]) })
	return cs
}

// errShed ends a connection the controller no longer wants.
var errShed = errors.New("one connection fewer")

// limiter holds the mirror's fetches, all together, to a rate
// (--download-rate). A nil limiter limits nothing.
type limiter struct {
	rate float64 // bytes a second
	mu   sync.Mutex
	next time.Time // when the bytes already let through are paid for
}

func newLimiter(bytesPerSecond int64) *limiter {
	if bytesPerSecond <= 0 {
		return nil
	}
	return &limiter{rate: float64(bytesPerSecond)}
}

// chunk is the most one read may ask for: a twentieth of a second's worth,
// so that no read waits long and the connections share the rate evenly.
func (l *limiter) chunk() int64 {
	if l == nil {
		return 1 << 62
	}
	return max(int64(l.rate/20), 4<<10)
}

// wait blocks until n more bytes fit in the rate. A tenth of a second of
// idleness may be made up in a burst, no more.
func (l *limiter) wait(ctx context.Context, n int) error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	now := time.Now()
	if floor := now.Add(-100 * time.Millisecond); l.next.Before(floor) {
		l.next = floor
	}
	l.next = l.next.Add(time.Duration(float64(n) / l.rate * float64(time.Second)))
	d := l.next.Sub(now)
	l.mu.Unlock()
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

package hubtest

import (
	"sync"
	"time"
)

// manners are how the CDN treats connections as a whole, as the Hub's does:
// each connection is served at a limited rate, and a client that holds too
// many at once has every one of them slowed (huggingface_hub #4893: 64
// connections went from 2.3 GB/s to under 1 MB/s). A downloader's choice of
// how many connections to open is only tested against a double that does
// both.
type manners struct {
	mu        sync.Mutex
	connRate  int64 // bytes a second for each connection; 0: unlimited
	over      int   // more connections than this at once are throttled; 0: never
	factor    int64 // how many times slower a throttled connection is
	active    int   // CDN bodies being sent now
	maxActive int
	overSince time.Time     // when active last went above over; zero when not above
	overTotal time.Duration // time spent above over, before overSince
}

// ConnRate limits every CDN connection to bytesPerSecond (0: no limit). A
// file's Trickle, when slower, still wins.
func (s *Server) ConnRate(bytesPerSecond int64) {
	s.manners.mu.Lock()
	s.manners.connRate = max(bytesPerSecond, 0)
	s.manners.mu.Unlock()
}

// Throttle slows every CDN connection factor times while more than over of
// them are sending at once (over 0 turns it off). It slows the ConnRate, so
// it needs one.
func (s *Server) Throttle(over, factor int) {
	s.manners.mu.Lock()
	s.manners.over, s.manners.factor = max(over, 0), int64(max(factor, 1))
	s.manners.mu.Unlock()
}

// Connections is how many CDN bodies are being sent now, and the most that
// ever were at once.
func (s *Server) Connections() (now, most int) {
	s.manners.mu.Lock()
	defer s.manners.mu.Unlock()
	return s.manners.active, s.manners.maxActive
}

// Throttled is how long, in all, more connections than Throttle's over were
// sending at once.
func (s *Server) Throttled() time.Duration {
	mn := &s.manners
	mn.mu.Lock()
	defer mn.mu.Unlock()
	d := mn.overTotal
	if !mn.overSince.IsZero() {
		d += time.Since(mn.overSince)
	}
	return d
}

// enter and leave count a body being sent.
func (mn *manners) enter() {
	mn.mu.Lock()
	mn.active++
	mn.maxActive = max(mn.maxActive, mn.active)
	if mn.over > 0 && mn.active > mn.over && mn.overSince.IsZero() {
		mn.overSince = time.Now()
	}
	mn.mu.Unlock()
}

func (mn *manners) leave() {
	mn.mu.Lock()
	mn.active--
	if !mn.overSince.IsZero() && (mn.over == 0 || mn.active <= mn.over) {
		mn.overTotal += time.Since(mn.overSince)
		mn.overSince = time.Time{}
	}
	mn.mu.Unlock()
}

// rate is the bytes a second one connection may send now, given the file's
// own trickle (0: none); 0 means unlimited.
func (mn *manners) rate(trickle int64) int64 {
	mn.mu.Lock()
	defer mn.mu.Unlock()
	r := mn.connRate
	if trickle > 0 && (r == 0 || trickle < r) {
		r = trickle
	}
	if r > 0 && mn.over > 0 && mn.active > mn.over {
		r = max(r/mn.factor, 1)
	}
	return r
}

package handlers

import (
	"sync"
	"time"

	"modelserve/views"
)

// lastRates are the download rates the job pages' streams worked out
// last, by job. A rate takes two readings, so a page just loaded (or
// reloaded) had none and said "—" for the first moments of a download it
// had shown at full speed a second before; it shows the last one known
// instead, until its own stream has a rate.
type lastRates struct {
	mu sync.Mutex
	m  map[string]lastRate
}

type lastRate struct {
	rate string
	at   time.Time
}

// rateFresh is how old a rate may be and still be shown: older, the
// download may have stalled since, and "—" is the truth.
const rateFresh = 30 * time.Second

// put keeps p's rate for job id, and lets go of the rates gone stale.
func (l *lastRates) put(id string, p *views.Progress, now time.Time) {
	if p == nil || p.Rate == "—" || p.Rate == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]lastRate{}
	}
	l.m[id] = lastRate{rate: p.Rate, at: now}
	for k, r := range l.m {
		if now.Sub(r.at) > rateFresh {
			delete(l.m, k)
		}
	}
}

// fill puts job id's last rate on p when p has none of its own.
func (l *lastRates) fill(id string, p *views.Progress, now time.Time) {
	if p == nil || p.Rate != "—" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.m[id]; ok && now.Sub(r.at) <= rateFresh {
		p.Rate = r.rate
	}
}

// mirrorProgress is the job's mirror step's progress, nil when it has none.
func mirrorProgress(vm *views.Job) *views.Progress {
	for i := range vm.Steps {
		if vm.Steps[i].Progress != nil {
			return vm.Steps[i].Progress
		}
	}
	return nil
}

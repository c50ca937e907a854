package handlers

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"

	"modelserve/internal/fleet"
)

// engineKeys is a fleet that can say each replica's engine key
// (fleet.Fleet). The key never leaves the fleet by its own fields, but an
// engine's log, and the reasons quoted from it, are the engine's words: one
// that echoed its command line would show the key to whoever reads them.
type engineKeys interface {
	EngineKey(id string) string
}

// redactedKey stands where an engine wrote its key.
const redactedKey = "[engine key]"

// fleetSnapshot is the fleet as one request shows it, with every engine
// key taken out of what the engines wrote, and no path on this machine.
type fleetSnapshot struct {
	replicas []fleet.Replica
	models   []fleet.ModelHealth
}

// snapshot reads the replicas and the models' health; ok is false without
// a fleet.
func (s *Server) snapshot() (fleetSnapshot, bool) {
	snap, ok := s.fleetNow()
	if !ok {
		return snap, false
	}
	return s.shown(snap), true
}

// fleetNow is the replicas and the models' health as the fleet has them,
// never nil, before shown; ok is false without a fleet.
func (s *Server) fleetNow() (fleetSnapshot, bool) {
	if s.deps.Fleet == nil {
		return fleetSnapshot{replicas: []fleet.Replica{}, models: []fleet.ModelHealth{}}, false
	}
	snap := fleetSnapshot{replicas: s.deps.Fleet.Replicas(), models: s.deps.Fleet.ModelHealth()}
	if snap.replicas == nil {
		snap.replicas = []fleet.Replica{}
	}
	if snap.models == nil {
		snap.models = []fleet.ModelHealth{}
	}
	return snap, true
}

// shown is snap as an answer may show it: the texts of its replicas and
// models with every engine key taken out and every path on the mirror
// relative to it.
func (s *Server) shown(snap fleetSnapshot) fleetSnapshot {
	// Every engine key known is taken out of every text (a reason quotes
	// an engine of its model, which may have ended since), and every path
	// on the mirror is written relative to it.
	var pairs []string
	if ek, ok := s.deps.Fleet.(engineKeys); ok {
		for _, r := range snap.replicas {
			if k := ek.EngineKey(r.ID); k != "" {
				pairs = append(pairs, k, redactedKey)
			}
		}
	}
	rp := strings.NewReplacer(pairs...)
	shown := func(text string) string { return s.deps.Mirror.ShownText(rp.Replace(text)) }
	for i := range snap.replicas {
		r := &snap.replicas[i]
		r.Detail, r.LastError = shown(r.Detail), shown(r.LastError)
		log := make([]string, len(r.Log))
		for j, line := range r.Log {
			log[j] = shown(line)
		}
		r.Log = log
	}
	for i := range snap.models {
		m := &snap.models[i]
		m.Reason, m.Placement = shown(m.Reason), shown(m.Placement)
	}
	return snap
}

// pageByModel is the part of snap about the models named after after, at
// most limit of them by name: their health and their replicas (a model
// removed whose replicas still drain counts as one), and whether models
// follow it, after the last model it holds. The fleet answers for every model at once, in memory; what
// a page leaves out is neither redacted nor sent.
func pageByModel(snap fleetSnapshot, after string, limit int) (page fleetSnapshot, last string, more bool) {
	names := map[string]bool{}
	for _, h := range snap.models {
		if h.Model > after {
			names[h.Model] = true
		}
	}
	for _, r := range snap.replicas {
		if r.Model > after {
			names[r.Model] = true
		}
	}
	sorted := slices.Sorted(maps.Keys(names))
	if more = len(sorted) > limit; more {
		sorted = sorted[:limit]
	}
	if len(sorted) > 0 {
		last = sorted[len(sorted)-1]
	}
	in := map[string]bool{}
	for _, n := range sorted {
		in[n] = true
	}
	page = fleetSnapshot{replicas: []fleet.Replica{}, models: []fleet.ModelHealth{}}
	for _, h := range snap.models {
		if in[h.Model] {
			page.models = append(page.models, h)
		}
	}
	for _, r := range snap.replicas {
		if in[r.Model] {
			page.replicas = append(page.replicas, r)
		}
	}
	slices.SortStableFunc(page.models, func(a, b fleet.ModelHealth) int { return strings.Compare(a.Model, b.Model) })
	slices.SortStableFunc(page.replicas, func(a, b fleet.Replica) int {
		return cmp.Or(strings.Compare(a.Model, b.Model), strings.Compare(a.ID, b.ID))
	})
	return page, last, more
}

// recentStarts is the fleet's newest engine starts, never nil. Failing to
// read them costs the page a section, not the page: it is logged.
func (s *Server) recentStarts(ctx context.Context) []fleet.Start {
	starts := []fleet.Start{}
	if s.deps.Fleet == nil {
		return starts
	}
	got, err := s.deps.Fleet.Starts(ctx, recentStarts)
	if err != nil {
		s.deps.Log.Error("reading the engine starts", "err", err)
		return starts
	}
	for _, st := range got {
		st.File = s.deps.Mirror.Shown(st.File)
		starts = append(starts, st)
	}
	return starts
}

// recentStarts is how many engine starts the fleet page and the API show.
const recentStarts = 50

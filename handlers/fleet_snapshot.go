package handlers

import (
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
// key taken out of what the engines wrote.
type fleetSnapshot struct {
	replicas []fleet.Replica
	models   []fleet.ModelHealth
}

// snapshot reads the replicas and the models' health; ok is false without
// a fleet.
func (s *Server) snapshot() (fleetSnapshot, bool) {
	if s.deps.Fleet == nil {
		return fleetSnapshot{}, false
	}
	snap := fleetSnapshot{replicas: s.deps.Fleet.Replicas(), models: s.deps.Fleet.ModelHealth()}
	if snap.replicas == nil {
		snap.replicas = []fleet.Replica{}
	}
	if snap.models == nil {
		snap.models = []fleet.ModelHealth{}
	}
	ek, ok := s.deps.Fleet.(engineKeys)
	if !ok {
		return snap, true
	}
	var pairs []string
	for _, r := range snap.replicas {
		if k := ek.EngineKey(r.ID); k != "" {
			pairs = append(pairs, k, redactedKey)
		}
	}
	if len(pairs) == 0 {
		return snap, true
	}
	// A reason quotes an engine of its model, which may have ended since:
	// every key known is taken out of every text.
	rp := strings.NewReplacer(pairs...)
	for i := range snap.replicas {
		r := &snap.replicas[i]
		r.Detail, r.LastError = rp.Replace(r.Detail), rp.Replace(r.LastError)
		log := make([]string, len(r.Log))
		for j, line := range r.Log {
			log[j] = rp.Replace(line)
		}
		r.Log = log
	}
	for i := range snap.models {
		m := &snap.models[i]
		m.Reason, m.Placement = rp.Replace(m.Reason), rp.Replace(m.Placement)
	}
	return snap, true
}

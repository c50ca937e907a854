package handlers

import (
	"context"
	"time"

	"modelserve/internal/fleet"
)

// FleetControls are what an operator may do to the fleet's replicas and
// models (fleet.Fleet): stop or restart one replica, and start a parked
// model again once its cause is fixed.
type FleetControls interface {
	Stop(id string) error
	Restart(id string) error
	Unpark(ctx context.Context, model string) error
}

// Scaler changes how many replicas of a model run (catalog.Store, or the
// fleet.NotifyingCatalog around it, which has the fleet act at once).
type Scaler interface {
	SetScaling(ctx context.Context, name string, min, max int, idleAfter *time.Duration) error
}

// replicaOf is the replica id as the fleet shows it now, engine keys taken
// out, for an API answer; ok is false when it is gone.
func (s *Server) replicaOf(id string) (fleet.Replica, bool) {
	snap, _ := s.snapshot()
	for _, r := range snap.replicas {
		if r.ID == id {
			return r, true
		}
	}
	return fleet.Replica{}, false
}

// modelHealthOf is how the fleet fares with model now.
func (s *Server) modelHealthOf(model string) (fleet.ModelHealth, bool) {
	snap, _ := s.snapshot()
	for _, h := range snap.models {
		if h.Model == model {
			return h, true
		}
	}
	return fleet.ModelHealth{}, false
}

// noControls is the refusal when nothing runs replicas to control.
const noControls = "this modelserve runs no fleet, so there is no replica or park to act on"

// replicaAction is Stop or Restart, by the word in the route.
func (s *Server) replicaAction(action string) func(string) error {
	if s.deps.Controls == nil {
		return nil
	}
	if action == "stop" {
		return s.deps.Controls.Stop
	}
	return s.deps.Controls.Restart
}

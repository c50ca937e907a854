package handlers

import (
	"context"
	"net/http"

	"modelserve/internal/fleet"
	"modelserve/internal/plan"
)

// apiReplicas is what the fleet runs: GET /api/v1/replicas — every replica
// with its state, endpoint, failures, memory (resident beside the estimate
// it was placed by) and the last lines of its engine's log, and how each
// model of the catalog fares (parked and why, waiting for room and what
// holds it), and the recent engine starts with their estimated and measured
// memory. Without a fleet the lists are empty: nothing runs replicas.
func (s *Server) apiReplicas(w http.ResponseWriter, r *http.Request) {
	snap, ok := s.snapshot()
	if !ok {
		snap = fleetSnapshot{replicas: []fleet.Replica{}, models: []fleet.ModelHealth{}}
	}
	starts := s.recentStarts(r.Context())
	writeJSON(w, http.StatusOK, map[string]any{"replicas": snap.replicas, "models": snap.models, "starts": starts})
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
	return append(starts, got...)
}

// recentStarts is how many engine starts the fleet page and the API show.
const recentStarts = 50

// apiNodes is the pool the planner plans for, and beside it the fleet's
// nodes with what is promised to replicas on each and what is free for
// another: GET /api/v1/nodes.
func (s *Server) apiNodes(w http.ResponseWriter, r *http.Request) {
	nodes := []plan.Node{}
	if s.deps.Pool != nil {
		nodes = append(nodes, s.deps.Pool.Nodes()...)
	}
	fleetNodes := []fleet.NodeStatus{}
	if s.deps.Fleet != nil {
		fleetNodes = append(fleetNodes, s.deps.Fleet.Nodes()...)
	}
	writeJSON(w, http.StatusOK, map[string]any{"nodes": nodes, "fleet": fleetNodes})
}

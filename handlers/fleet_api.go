package handlers

import (
	"net/http"

	"modelserve/internal/fleet"
	"modelserve/internal/plan"
)

// apiReplicas is what the fleet runs: GET /api/v1/replicas — every replica
// with its state, endpoint, failures, memory (resident beside the estimate
// it was placed by) and the last lines of its engine's log, and how each
// model of the catalog fares (parked and why, waiting for room and what
// holds it). Without a fleet both lists are empty: nothing runs replicas.
func (s *Server) apiReplicas(w http.ResponseWriter, r *http.Request) {
	snap, ok := s.snapshot()
	if !ok {
		snap = fleetSnapshot{replicas: []fleet.Replica{}, models: []fleet.ModelHealth{}}
	}
	writeJSON(w, http.StatusOK, map[string]any{"replicas": snap.replicas, "models": snap.models})
}

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

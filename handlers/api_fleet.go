package handlers

import (
	"math"
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

// apiNodes is the pool the planner plans for, and beside it the fleet's
// nodes with what is promised to replicas on each and what is free for
// another: GET /api/v1/nodes. Every figure of memory is in bytes, as the
// planner's and the fleet's are.
func (s *Server) apiNodes(w http.ResponseWriter, r *http.Request) {
	nodes := []apiNode{}
	if s.deps.Pool != nil {
		for _, n := range s.deps.Pool.Nodes() {
			nodes = append(nodes, apiNodeOf(n))
		}
	}
	fleetNodes := []fleet.NodeStatus{}
	if s.deps.Fleet != nil {
		fleetNodes = append(fleetNodes, s.deps.Fleet.Nodes()...)
	}
	writeJSON(w, http.StatusOK, map[string]any{"nodes": nodes, "fleet": fleetNodes})
}

// apiNode is a node of the pool as the API shows it: plan.Node in bytes
// and bytes per second.
type apiNode struct {
	Name     string `json:"name"`
	Local    bool   `json:"local,omitempty"`
	CPUCores int    `json:"cpu_cores"`
	RAMBytes int64  `json:"ram_bytes"`
	// FreeRAMBytes is what a new replica can have now.
	FreeRAMBytes            int64     `json:"free_ram_bytes"`
	CPUBandwidthBytesPerSec int64     `json:"cpu_bandwidth_bytes_per_second"`
	GPUs                    []apiGPUs `json:"gpus"`
	Note                    string    `json:"note,omitempty"`
}

// apiGPUs is a node's cards of one class: plan.GPU in bytes.
type apiGPUs struct {
	Class                string  `json:"class"`
	Count                int     `json:"count"`
	MemoryBytes          int64   `json:"memory_bytes"`
	BandwidthBytesPerSec int64   `json:"bandwidth_bytes_per_second"`
	BandwidthEstimated   bool    `json:"bandwidth_estimated,omitempty"`
	FreeBytes            []int64 `json:"free_bytes"`
}

func apiNodeOf(n plan.Node) apiNode {
	out := apiNode{Name: n.Name, Local: n.Local, CPUCores: n.CPUCores, RAMBytes: n.RAMBytes,
		FreeRAMBytes: n.FreeRAMBytes, CPUBandwidthBytesPerSec: gbBytes(n.CPUBandwidthGBs),
		GPUs: []apiGPUs{}, Note: n.Note}
	for _, g := range n.GPUs {
		out.GPUs = append(out.GPUs, apiGPUs{Class: g.Class, Count: g.Count, MemoryBytes: g.MemoryBytes,
			BandwidthBytesPerSec: gbBytes(g.BandwidthGBs), BandwidthEstimated: g.BandwidthEstimated, FreeBytes: append([]int64{}, g.FreeBytes...)})
	}
	return out
}

// gbBytes turns the planner's bandwidths (GB/s, decimal, as datasheets
// give them) into bytes per second.
func gbBytes(gb float64) int64 { return int64(math.Round(gb * 1e9)) }

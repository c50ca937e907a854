package handlers

import (
	"math"
	"net/http"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/plan"
)

// apiReplicas is what the fleet runs: GET /api/v1/replicas — every replica
// with its state, endpoint, failures, memory (resident beside the estimate
// it was placed by) and the last lines of its engine's log, and how each
// model of the catalog fares (parked and why, waiting for room and what
// holds it), and the recent engine starts with their estimated and measured
// memory. Without a fleet the lists are empty: nothing runs replicas.
//
// It is paged by model, as the catalog is: ?limit= models (default
// catalog.DefaultPage, at most 500) named ?after= a model's name, each
// with its health and its replicas; a page with more after it has next,
// the URL of that page. The starts, the fleet's newest, come with the
// first page.
func (s *Server) apiReplicas(w http.ResponseWriter, r *http.Request) {
	after, limit, err := modelCursor(r, catalog.DefaultPage, "the replicas are")
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	all, _ := s.fleetNow()
	page, last, more := pageByModel(all, after, limit)
	page = s.shown(page)
	out := map[string]any{"replicas": page.replicas, "models": page.models, "limit": limit}
	if after == "" {
		out["starts"] = s.recentStarts(r.Context())
	}
	if more {
		out["next"] = nextPage("/api/v1/replicas", limit, last)
	}
	writeJSON(w, http.StatusOK, out)
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

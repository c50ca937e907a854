package handlers

import (
	"net/http"
	"slices"

	"modelserve/internal/fleet"
	"modelserve/internal/operr"
	"modelserve/internal/rollup"
)

// apiModelSeries is a model's last hour at the gateway, a minute at a
// time, as its charts draw it: GET /api/v1/catalog/{name}/series. The
// last minute is the one in progress ("partial"). Latencies are in
// milliseconds.
func (s *Server) apiModelSeries(w http.ResponseWriter, r *http.Request) {
	m, err := s.deps.Catalog.Get(r.Context(), r.PathValue("name"))
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	h, _ := s.hour()
	minutes := h.Models[m.Name]
	if minutes == nil {
		minutes = []rollup.ModelMinute{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"model": m.Name, "start": h.Start, "end": h.End, "minutes": minutes})
}

// apiNodeSeries is a node's memory over the last hour, a minute at a time,
// in bytes: GET /api/v1/nodes/{name}/series.
func (s *Server) apiNodeSeries(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var nodes []fleet.NodeStatus
	if s.deps.Fleet != nil {
		nodes = s.deps.Fleet.Nodes()
	}
	if !slices.ContainsFunc(nodes, func(n fleet.NodeStatus) bool { return n.Name == name }) {
		writeJSON(w, http.StatusNotFound, errorBody{Error: "the fleet has no node " + operr.Quote(name) + "; GET /api/v1/nodes lists them"})
		return
	}
	h, _ := s.hour()
	minutes := h.Nodes[name]
	if minutes == nil {
		minutes = []rollup.NodeMinute{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"node": name, "start": h.Start, "end": h.End, "minutes": minutes})
}

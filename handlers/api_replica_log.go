package handlers

import (
	"net/http"

	"modelserve/internal/fleet"
	"modelserve/internal/operr"
)

// replicaLog is GET /api/v1/replicas/{id}/log's answer: the replica's
// engine log as the fleet keeps it (its last lines, a bounded ring), with
// its state, so that a client following it knows when it stops.
type replicaLog struct {
	ID    string      `json:"id"`
	Model string      `json:"model"`
	State fleet.State `json:"state"`
	Lines []string    `json:"lines"`
}

// apiReplicaLog is the JSON twin of the replica's log page: the last lines
// its engine wrote, engine keys and mirror paths taken out as the page
// takes them; 404 once the fleet no longer has the replica.
func (s *Server) apiReplicaLog(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	rep, ok := s.replicaOf(id)
	if !ok {
		s.apiError(w, r, operr.New(operr.NotFound, "the fleet has no replica named %s: it may have stopped since; GET /api/v1/replicas lists those it has", operr.Quote(id)))
		return
	}
	lines := rep.Log
	if lines == nil {
		lines = []string{}
	}
	writeJSON(w, http.StatusOK, replicaLog{ID: rep.ID, Model: rep.Model, State: rep.State, Lines: lines})
}

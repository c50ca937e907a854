package handlers

import (
	"net/http"

	"modelserve/internal/fleet"
	"modelserve/internal/operr"
)

// apiReplicaControl is POST /api/v1/replicas/{id}/stop and /restart: 202
// and the replica as it is now (stopping, or starting again).
func (s *Server) apiReplicaControl(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		do := s.replicaAction(action)
		if do == nil {
			s.apiError(w, r, operr.New(operr.Unavailable, "%s", noControls))
			return
		}
		id := r.PathValue("id")
		if err := do(id); err != nil {
			s.apiError(w, r, err)
			return
		}
		s.deps.Log.Info("replica "+action+" through the API", "replica", id)
		rep, ok := s.replicaOf(id)
		if !ok {
			// Stopped already: gone from the fleet's list.
			rep = fleet.Replica{ID: id, State: fleet.Stopped}
		}
		writeJSON(w, http.StatusAccepted, rep)
	}
}

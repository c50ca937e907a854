package handlers

import (
	"net/http"

	"modelserve/internal/fleet"
	"modelserve/internal/operr"
)

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

// replicaControl stops or restarts a replica from the fleet page, then
// shows the page again.
func (s *Server) replicaControl(action string) page {
	return func(w http.ResponseWriter, r *http.Request, v visit) {
		do := s.replicaAction(action)
		if do == nil {
			s.message(w, r, v, http.StatusNotImplemented, "Not done", noControls)
			return
		}
		id := r.PathValue("id")
		if err := do(id); err != nil {
			s.pageError(w, r, v, err)
			return
		}
		s.deps.Log.Info("replica "+action+" from the console", "replica", id, "user", v.user)
		toFleet(w, r, action, id)
	}
}

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

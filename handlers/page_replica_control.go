package handlers

import (
	"net/http"
)

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

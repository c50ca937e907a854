package handlers

import (
	"net/http"
)

// modelUnpark starts a parked model again, from the fleet page, then shows
// the page again.
func (s *Server) modelUnpark(w http.ResponseWriter, r *http.Request, v visit) {
	if s.deps.Controls == nil {
		s.message(w, r, v, http.StatusNotImplemented, "Not done", noControls)
		return
	}
	name := r.PathValue("name")
	if err := s.deps.Controls.Unpark(r.Context(), name); err != nil {
		s.pageError(w, r, v, err)
		return
	}
	s.deps.Log.Info("model unparked from the console", "model", name, "user", v.user)
	toFleet(w, r, "unpark", name)
}

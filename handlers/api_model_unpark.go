package handlers

import (
	"net/http"

	"modelserve/internal/operr"
)

// apiModelUnpark is POST /api/v1/catalog/{name}/unpark: 200 and how the
// fleet fares with the model now.
func (s *Server) apiModelUnpark(w http.ResponseWriter, r *http.Request) {
	if s.deps.Controls == nil {
		s.apiError(w, r, operr.New(operr.Unavailable, "%s", noControls))
		return
	}
	name := r.PathValue("name")
	if err := s.deps.Controls.Unpark(r.Context(), name); err != nil {
		s.apiError(w, r, err)
		return
	}
	s.deps.Log.Info("model unparked through the API", "model", name)
	h, _ := s.modelHealthOf(name)
	writeJSON(w, http.StatusOK, h)
}

package handlers

import "net/http"

func (s *Server) apiMirrorList(w http.ResponseWriter, r *http.Request) {
	entries, err := s.deps.Mirror.List(r.Context())
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"files": entries})
}

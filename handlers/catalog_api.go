package handlers

import (
	"net/http"
)

func (s *Server) apiCatalogList(w http.ResponseWriter, r *http.Request) {
	models, err := s.deps.Catalog.List(r.Context())
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": models})
}

func (s *Server) apiCatalogShow(w http.ResponseWriter, r *http.Request) {
	m, err := s.deps.Catalog.Get(r.Context(), r.PathValue("name"))
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}

func (s *Server) apiCatalogRemove(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.deps.Catalog.Remove(r.Context(), name); err != nil {
		s.apiError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

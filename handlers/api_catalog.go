package handlers

import (
	"net/http"

	"modelserve/catalog"
)

func (s *Server) apiCatalogList(w http.ResponseWriter, r *http.Request) {
	models, err := s.deps.Catalog.List(r.Context())
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	for i := range models {
		models[i] = s.shownModel(models[i])
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": models})
}

// shownModel is m as an answer shows it: its weights by where they are on
// the mirror, not by a path on this machine.
func (s *Server) shownModel(m catalog.Model) catalog.Model {
	m.Source = s.deps.Mirror.Shown(m.Source)
	return m
}

func (s *Server) apiCatalogShow(w http.ResponseWriter, r *http.Request) {
	m, err := s.deps.Catalog.Get(r.Context(), r.PathValue("name"))
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.shownModel(m))
}

func (s *Server) apiCatalogRemove(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.deps.Catalog.Remove(r.Context(), name); err != nil {
		s.apiError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

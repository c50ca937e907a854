package handlers

import (
	"net/http"

	"modelserve/internal/operr"
	"modelserve/internal/store"
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
		if store.Full(err) {
			// The disk's fault, not the program's: said, not a 500.
			err = operr.Wrap(operr.Unavailable, err, "%s could not be removed from the catalog: modelserve's disk is full; "+
				"free some space in its data folder (the mirror page removes files), then remove it again", operr.Quote(name))
		}
		s.apiError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

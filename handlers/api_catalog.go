package handlers

import (
	"net/http"
	"net/url"
	"strconv"

	"modelserve/catalog"
)

// apiCatalogList is GET /api/v1/catalog: the catalog's models by name;
// ?limit= (default catalog.DefaultPage, at most 500) and
// ?after= (a model's name: those after it) page them. A page with more
// after it has next, the URL of that page; the last has none.
func (s *Server) apiCatalogList(w http.ResponseWriter, r *http.Request) {
	after, limit, err := modelCursor(r, catalog.DefaultPage, "the catalog is")
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	page, err := s.deps.Catalog.Page(r.Context(), catalog.PageQuery{After: after, Limit: limit})
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	shown := make([]catalog.Model, len(page.Models))
	for i, m := range page.Models {
		shown[i] = s.shownModel(m)
	}
	out := map[string]any{"models": shown, "limit": limit}
	if page.More {
		out["next"] = nextPage("/api/v1/catalog", limit, page.Models[len(page.Models)-1].Name)
	}
	writeJSON(w, http.StatusOK, out)
}

// nextPage is the URL of the page of path after the one that ended at
// last, as long as it.
func nextPage(path string, limit int, last string) string {
	return path + "?" + url.Values{"limit": {strconv.Itoa(limit)}, "after": {last}}.Encode()
}

// modelCursor is a page of a list kept by model name (the catalog, the
// replicas) as a request asks for it: the name it begins after ("" for
// the first page) and its length, def when not asked. what is the list
// and its verb in the sentence refusing an offset ("the catalog is").
func modelCursor(r *http.Request, def int, what string) (after string, limit int, err error) {
	if limit, err = pageLimit(r, def); err != nil {
		return "", 0, err
	}
	q := r.URL.Query()
	if q.Has("offset") {
		return "", 0, badRequest(what + " paged by after (a model's name), not by offset: follow the answer's next")
	}
	if q.Has("after") {
		after = q.Get("after")
		if err := catalog.CheckAfter(after); err != nil {
			return "", 0, err
		}
	}
	return after, limit, nil
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

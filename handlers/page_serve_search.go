package handlers

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"modelserve/internal/hf"
	"modelserve/internal/operr"
	"modelserve/internal/words"
	"modelserve/views"
)

// Finder finds repositories by a word of their names, for the serve page's
// search (hf.Registries): an operator need not know the exact id.
type Finder interface {
	Search(ctx context.Context, query string) ([]hf.Found, error)
}

// serveSearch is the search's results, for htmx as the operator types. The
// page itself shows the same results for ?q= (the form without JavaScript).
func (s *Server) serveSearch(w http.ResponseWriter, r *http.Request, v visit) {
	if !isFragment(r) {
		http.Redirect(w, r, withQuery("/serve", r.URL.RawQuery), http.StatusSeeOther)
		return
	}
	// A failed search is a sentence in place, answered 200 so htmx swaps it.
	s.render(w, r, http.StatusOK, views.ServeSearchResults(s.searchModels(r)))
}

// searchModels runs the query's search, when there is one and a registry
// to ask.
func (s *Server) searchModels(r *http.Request) views.ServeSearch {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	if q == "" || s.deps.Finder == nil {
		return views.ServeSearch{}
	}
	ss := views.ServeSearch{Query: q, Shown: true}
	if runes := []rune(q); len(runes) > hf.MaxQuery {
		ss.Query = string(runes[:hf.MaxQuery]) // the field echoes no more than it takes
	}
	found, err := s.deps.Finder.Search(r.Context(), q)
	if err != nil {
		msg, ok := operr.Sentence(err)
		if !ok {
			if r.Context().Err() == nil {
				s.deps.Log.Error("searching the registries for the serve page", "err", err)
			}
			msg = "the search failed; the server's log says why"
		}
		ss.Error = msg
	}
	for _, f := range found {
		ss.Results = append(ss.Results, views.Found{
			ID: f.ID, Href: "/serve?repo=" + url.QueryEscape(f.ID),
			Downloads: words.Count(int(f.Downloads), "download", "downloads"),
			Likes:     words.Count(int(f.Likes), "like", "likes"),
			Gated:     f.Gated, Private: f.Private, Local: f.Local,
		})
	}
	return ss
}

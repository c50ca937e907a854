package handlers

import (
	"net/http"
	"strconv"
	"strings"
)

// modelScale changes how many replicas of a model run, from the fleet
// page's form (min, max), then shows the page again.
func (s *Server) modelScale(w http.ResponseWriter, r *http.Request, v visit) {
	name := r.PathValue("name")
	lo, err := replicaCount(r.PostFormValue("min"), "fewest")
	if err == nil {
		var hi int
		if hi, err = replicaCount(r.PostFormValue("max"), "most"); err == nil {
			err = s.deps.Catalog.SetScaling(r.Context(), name, lo, hi)
		}
	}
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	s.deps.Log.Info("model scaled from the console", "model", name, "min", r.PostFormValue("min"), "max", r.PostFormValue("max"), "user", v.user)
	toFleet(w, r, "scale", name)
}

// replicaCount reads a form's count of replicas.
func replicaCount(text, which string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(text))
	if err != nil {
		return 0, badRequest("the " + which + " replicas to run is a whole number, 0 or more, not " + quoteShort(text))
	}
	return n, nil
}

// quoteShort is a form's value quoted for a sentence, cut short.
func quoteShort(s string) string {
	if len(s) > 20 {
		s = s[:20] + "…"
	}
	return strconv.Quote(s)
}

// scaleBody is POST /api/v1/catalog/{name}/scale's body.
type scaleBody struct {
	Min *int `json:"min"`
	Max *int `json:"max"`
}

// apiModelScale is POST /api/v1/catalog/{name}/scale with {"min","max"}:
// 200 and the catalog entry as it now is.
func (s *Server) apiModelScale(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var b scaleBody
	if err := decodeJSON(w, r, &b); err != nil {
		s.apiError(w, r, err)
		return
	}
	if b.Min == nil || b.Max == nil {
		s.apiError(w, r, badRequest(`scaling needs both bounds: send {"min": N, "max": M}, the fewest replicas to keep and the most to run`))
		return
	}
	if err := s.deps.Catalog.SetScaling(r.Context(), name, *b.Min, *b.Max); err != nil {
		s.apiError(w, r, err)
		return
	}
	s.deps.Log.Info("model scaled through the API", "model", name, "min", *b.Min, "max", *b.Max)
	m, err := s.deps.Catalog.Get(r.Context(), name)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}

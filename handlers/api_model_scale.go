package handlers

import (
	"net/http"
	"time"

	"modelserve/catalog"
)

// scaleBody is POST /api/v1/catalog/{name}/scale's body.
type scaleBody struct {
	Min *int `json:"min"`
	Max *int `json:"max"`
	// IdleAfter is "30s", "15m", or "0" for the default; left out (or
	// null), it is left as it is.
	IdleAfter *string `json:"idle_after"`
}

// apiModelScale is POST /api/v1/catalog/{name}/scale with {"min","max"}
// and optionally "idle_after": 200 and the catalog entry as it now is.
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
	var idle *time.Duration
	idleText := "unchanged"
	if b.IdleAfter != nil {
		idleText = *b.IdleAfter
		d, err := catalog.ParseIdleAfter(*b.IdleAfter)
		if err != nil {
			s.apiError(w, r, err)
			return
		}
		idle = &d
	}
	if err := s.deps.Catalog.SetScaling(r.Context(), name, *b.Min, *b.Max, idle); err != nil {
		s.apiError(w, r, err)
		return
	}
	s.deps.Log.Info("model scaled through the API", "model", name, "min", *b.Min, "max", *b.Max, "idle_after", idleText)
	m, err := s.deps.Catalog.Get(r.Context(), name)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}

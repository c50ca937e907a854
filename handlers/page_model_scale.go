package handlers

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"modelserve/catalog"
)

// modelScale changes how many replicas of a model run and how long those
// on demand wait for a request, from the fleet page's form (min, max,
// idle_after), then shows the page again.
func (s *Server) modelScale(w http.ResponseWriter, r *http.Request, v visit) {
	name := r.PathValue("name")
	lo, err := replicaCount(r.PostFormValue("min"), "fewest")
	var hi int
	if err == nil {
		hi, err = replicaCount(r.PostFormValue("max"), "most")
	}
	var idle *time.Duration
	if err == nil {
		idle, err = formIdleAfter(r)
	}
	if err == nil {
		err = s.deps.Catalog.SetScaling(r.Context(), name, lo, hi, idle)
	}
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	s.deps.Log.Info("model scaled from the console", "model", name, "min", lo, "max", hi, "idle_after", r.PostFormValue("idle_after"), "user", v.user)
	toFleet(w, r, "scale", name)
}

// formIdleAfter is the scale form's idle time: nil (unchanged) when the
// form has no such field, the default when it is left empty, as the form
// shows the default.
func formIdleAfter(r *http.Request) (*time.Duration, error) {
	if _, sent := r.PostForm["idle_after"]; !sent {
		return nil, nil
	}
	text := strings.TrimSpace(r.PostFormValue("idle_after"))
	if text == "" {
		text = "0"
	}
	d, err := catalog.ParseIdleAfter(text)
	if err != nil {
		return nil, err
	}
	return &d, nil
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

package handlers

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"modelserve/catalog"
	"modelserve/internal/operr"
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
		return 0, badRequest("the " + which + " replicas to run is a whole number, 0 or more, not " + operr.Quote(text))
	}
	return n, nil
}

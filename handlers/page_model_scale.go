package handlers

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"modelserve/catalog"
	"modelserve/internal/operr"
	"modelserve/views"
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
		s.scaleRefused(w, r, v, name, err)
		return
	}
	s.deps.Log.Info("model scaled from the console", "model", name, "min", lo, "max", hi, "idle_after", r.PostFormValue("idle_after"), "user", v.user)
	toFleet(w, r, "scale", name)
}

// scaleRefused answers a scale the form or the catalog refused. From the
// page (htmx), the sentence goes just after the model's scale form, the
// page left as it was; a full "Not done" page took the operator away from
// the figures they were scaling by. Without JavaScript, or for a failure
// that is not the operator's to mend, it is the message page.
func (s *Server) scaleRefused(w http.ResponseWriter, r *http.Request, v visit, model string, err error) {
	// The form is boosted, as every form on the page: htmx sends it, and
	// the answer's headers put it in place; a browser without JavaScript
	// sends it alone.
	status, ok := operatorStatus(err)
	if !ok || r.Header.Get("HX-Request") != "true" {
		s.pageError(w, r, v, err)
		return
	}
	msg, _ := operr.Sentence(err)
	// The form as views/fleet.templ writes it; a catalog name has no
	// quote or backslash, but one in the path is escaped all the same.
	css := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(model)
	w.Header().Set("HX-Retarget", `form[action="/fleet/models/`+css+`/scale"]`)
	w.Header().Set("HX-Reswap", "afterend")
	// The page stays the fleet page, in the address bar and the history.
	w.Header().Set("HX-Push-Url", "false")
	s.render(w, r, status, views.ScaleRefused(model, msg))
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

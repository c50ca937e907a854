package handlers

import (
	"net/http"
	"strconv"

	"modelserve/internal/operr"
	"modelserve/views"
)

// evalsRun runs a model's suite against it now, in the background, then
// back to the page, where the run's column fills in as each case is
// answered. A run refused (no suite, one under way) is said on the page.
func (s *Server) evalsRun(w http.ResponseWriter, r *http.Request, v visit) {
	name := r.PathValue("name")
	run, err := s.deps.Evals.Start(r.Context(), name, name)
	if e, ok := operr.As(err); ok && e.Kind != operr.NotFound {
		p, _, lerr := s.loadEvals(r.Context(), v, name)
		if lerr != nil {
			s.pageError(w, r, v, lerr)
			return
		}
		p.RunError = e.Msg
		s.render(w, r, http.StatusOK, views.EvalsPageView(p))
		return
	}
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	s.deps.Log.Info("eval run started from the console", "model", name, "run", run.ID, "user", v.user)
	http.Redirect(w, r, evalsURL(name)+"?ran="+strconv.FormatInt(run.ID, 10), http.StatusSeeOther)
}

package handlers

import (
	"net/http"
	"net/url"
)

// jobCancel stops a running job and shows it.
func (s *Server) jobCancel(w http.ResponseWriter, r *http.Request, v visit) {
	j, err := s.deps.Jobs.Cancel(r.Context(), r.PathValue("id"))
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	s.deps.Log.Info("job cancelled from the console", "job", j.ID, "user", v.user)
	http.Redirect(w, r, "/jobs/"+url.PathEscape(j.ID), http.StatusSeeOther)
}

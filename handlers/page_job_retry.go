package handlers

import (
	"net/http"
	"net/url"
)

// jobRetry starts a failed job again, as a new job, and shows that one.
func (s *Server) jobRetry(w http.ResponseWriter, r *http.Request, v visit) {
	j, err := s.deps.Jobs.Retry(r.Context(), r.PathValue("id"))
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	s.deps.Log.Info("job retried from the console", "job", j.ID, "retry_of", j.RetryOf, "user", v.user)
	http.Redirect(w, r, "/jobs/"+url.PathEscape(j.ID), http.StatusSeeOther)
}

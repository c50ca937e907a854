package handlers

import "net/http"

// home is the jobs: what is happening, and the way to start more.
func (s *Server) home(w http.ResponseWriter, r *http.Request, v visit) {
	http.Redirect(w, r, "/jobs", http.StatusSeeOther)
}

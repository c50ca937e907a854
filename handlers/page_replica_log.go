package handlers

import (
	"net/http"
	"time"

	"modelserve/internal/operr"
	"modelserve/views"
)

// replicaLogPage is a replica's engine log: the last lines it wrote, on
// demand rather than on every look of the fleet page.
func (s *Server) replicaLogPage(w http.ResponseWriter, r *http.Request, v visit) {
	id := r.PathValue("id")
	rep, ok := s.replicaOf(id)
	if !ok {
		s.message(w, r, v, http.StatusNotFound, "No such replica",
			"the fleet has no replica named "+operr.Quote(id)+": it may have stopped since; the fleet page lists those it has")
		return
	}
	now := time.Now()
	s.render(w, r, http.StatusOK, views.ReplicaLogPage(views.ReplicaLog{
		Layout: s.layout(v, "fleet", id+" · engine log"), ID: rep.ID, Lines: rep.Log, AsOf: timeText(now, now),
	}))
}

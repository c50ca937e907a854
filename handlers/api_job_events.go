package handlers

import (
	"encoding/json"
	"fmt"
	"net/http"

	"modelserve/jobs"
)

// apiJobEvents streams a job as JSON: the job as it stands first, then each
// change, each event's id the job's change number. The event of a job that
// has ended is named "end", and the stream closes once it is out, as the
// console's does: a script's loop ends with the job.
func (s *Server) apiJobEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := s.deps.Jobs.Get(r.Context(), id); err != nil {
		s.apiError(w, r, err)
		return
	}
	ch, cancel := s.deps.Jobs.Subscribe(id)
	defer cancel()
	ew := newEndWatcher(w)
	s.events.serve(ew, r, untilEnded(r.Context(), ch, ew.sent()), func(ev jobs.Event) ([]byte, string, error) {
		b, err := json.Marshal(ev.Job)
		if err != nil {
			return nil, "", fmt.Errorf("encode job %s: %w", ev.Job.ID, err)
		}
		if ev.Job.Ended() {
			return b, "end", nil
		}
		return b, "job", nil
	})
}

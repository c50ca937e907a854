package handlers

import (
	"context"
	"net/http"
	"time"

	"modelserve/jobs"
	"modelserve/views"
)

// jobsStream redraws a page of the list as jobs change, at most every
// jobsRedraw, and first as it stands (for a browser reconnecting). An older
// page keeps its cursor, so it holds the same jobs as they change.
func (s *Server) jobsStream(w http.ResponseWriter, r *http.Request, v visit) {
	before, err := beforeParam(r)
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	ch, cancel := s.deps.Jobs.Subscribe("")
	defer cancel()
	s.events.serve(w, r, coalesce(r.Context(), ch, jobsRedraw), func(jobs.Event) ([]byte, string, error) {
		list, err := s.jobsList(r.Context(), before)
		if err != nil {
			if r.Context().Err() == nil {
				s.deps.Log.Error("redrawing the jobs list", "err", err)
			}
			return nil, "", err
		}
		data, err := renderString(r.Context(), views.JobsList(list))
		return data, "jobs", err
	})
}

// coalesce turns a flood of changes into at most one redraw every period,
// with one at once to begin with. The events it sends carry no job: each
// only says "redraw". It never stops reading in: a redraw still waiting
// to be drawn (a long list renders slowly under load) draws the list as it
// is then, so a change meanwhile needs no second one; and a reader that
// stopped reading its watch for as long as the redraw took was dropped by
// the jobs' hub as a watcher gone slow, ending the page's stream.
func coalesce(ctx context.Context, in <-chan jobs.Event, period time.Duration) <-chan jobs.Event {
	out := make(chan jobs.Event, 1)
	out <- jobs.Event{Seq: 1}
	go func() {
		defer close(out)
		t := time.NewTicker(period)
		defer t.Stop()
		seq, dirty := int64(1), false
		for {
			select {
			case _, ok := <-in:
				if !ok {
					return
				}
				dirty = true
			case <-t.C:
				if !dirty {
					continue
				}
				seq++
				select {
				case out <- jobs.Event{Seq: seq}:
				default: // one is waiting to be drawn: it draws this too
				}
				dirty = false
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

package handlers

import (
	"context"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"modelserve/jobs"
	"modelserve/views"
)

// jobsPerPage is how many jobs a page of the list holds.
const jobsPerPage = 25

// jobsRedraw is the least time between two redraws of a live list: a job
// fetching reports a few times a second, and a list a second old is live
// enough.
const jobsRedraw = time.Second

// jobsPage lists the jobs, newest first, a page (?page=) at a time.
func (s *Server) jobsPage(w http.ResponseWriter, r *http.Request, v visit) {
	n, err := pageParam(r)
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	list, err := s.jobsList(r.Context(), n)
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	s.render(w, r, http.StatusOK, views.JobsPageView(views.JobsPage{
		Layout: s.layout(v, "jobs", "Jobs"), Jobs: list, Stream: "/jobs/stream?page=" + strconv.Itoa(n),
	}))
}

// jobsStream redraws a page of the list as jobs change, at most every
// jobsRedraw, and first as it stands (for a browser reconnecting).
func (s *Server) jobsStream(w http.ResponseWriter, r *http.Request, v visit) {
	n, err := pageParam(r)
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	ch, cancel := s.deps.Jobs.Subscribe("")
	defer cancel()
	s.events.serve(w, r, coalesce(r.Context(), ch, jobsRedraw), func(jobs.Event) ([]byte, string, error) {
		list, err := s.jobsList(r.Context(), n)
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
// only says "redraw".
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
					dirty = false
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

func pageParam(r *http.Request) (int, error) {
	q := r.URL.Query().Get("page")
	if q == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(q)
	if err != nil || n < 1 || n > 1_000_000 {
		return 0, badRequest("the page is a whole number from 1, not " + strconv.Quote(q))
	}
	return n, nil
}

// jobsList is page n of the jobs.
func (s *Server) jobsList(ctx context.Context, n int) (views.Jobs, error) {
	list, total, err := s.deps.Jobs.List(ctx, jobs.ListOptions{Limit: jobsPerPage, Offset: (n - 1) * jobsPerPage})
	if err != nil {
		return views.Jobs{}, err
	}
	now := time.Now()
	out := views.Jobs{Page: n, Total: total, Pages: max(1, int(math.Ceil(float64(total)/jobsPerPage)))}
	for _, j := range list {
		end := now
		if j.Ended() && !j.Finished.IsZero() {
			end = j.Finished
		}
		step := "—"
		if len(j.Steps) > 0 {
			step = j.Steps[len(j.Steps)-1].Name
		}
		out.Rows = append(out.Rows, views.JobRow{
			ID: j.ID, URL: "/jobs/" + url.PathEscape(j.ID), Model: or(j.Model, j.Request.Name, j.Request.Repo),
			Repo: j.Request.Repo, State: views.StateOf(j.State), Step: step,
			Started: timeText(j.Started, now), StartedISO: j.Started.UTC().Format(time.RFC3339),
			Took: durationText(end.Sub(j.Started)),
		})
	}
	if n > 1 {
		out.Prev = "/jobs?page=" + strconv.Itoa(n-1)
	}
	if (n-1)*jobsPerPage+len(list) < total {
		out.Next = "/jobs?page=" + strconv.Itoa(n+1)
	}
	return out, nil
}

// or is the first of vs that is not empty.
func or(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

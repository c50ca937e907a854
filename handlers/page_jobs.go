package handlers

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"modelserve/internal/operr"
	"modelserve/jobs"
	"modelserve/views"
)

// jobsPerPage is how many jobs a page of the list holds.
const jobsPerPage = 25

// jobsRedraw is the least time between two redraws of a live list: a job
// fetching reports a few times a second, and a list a second old is live
// enough.
const jobsRedraw = time.Second

// jobsPage lists the jobs, newest first, a page at a time: ?before= (a
// job's id) lists those older than it. A cursor rather than a page number:
// a page that skips N jobs reads N rows, and shifts by one each time a job
// starts while the operator reads it.
func (s *Server) jobsPage(w http.ResponseWriter, r *http.Request, v visit) {
	q := r.URL.Query()
	if q.Has("page") && q.Get("page") != "1" {
		// Numbered pages are gone; a link to one kept from before lands on
		// the newest jobs, where the older-jobs links start. ?page=1 is
		// the newest page already, and is served as it is.
		http.Redirect(w, r, "/jobs", http.StatusSeeOther)
		return
	}
	before, err := beforeParam(r)
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	list, err := s.jobsList(r.Context(), before)
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	stream := "/jobs/stream"
	if before != "" {
		stream += "?" + url.Values{"before": {before}}.Encode()
	}
	s.render(w, r, http.StatusOK, views.JobsPageView(views.JobsPage{
		Layout: s.layout(v, "jobs", "Jobs"), Jobs: list, Stream: stream,
	}))
}

// beforeParam is the ?before= cursor, "" for the newest jobs. A job id is
// short; anything longer is refused before it reaches a query or a sentence.
func beforeParam(r *http.Request) (string, error) {
	before := strings.TrimSpace(r.URL.Query().Get("before"))
	if len(before) > 200 {
		return "", badRequest("before is the id of a job in the list, not " + operr.Quote(before))
	}
	return before, nil
}

// jobsList is the page of jobs older than before (the newest for ""). It
// asks for one job more than it shows, to know whether older ones remain.
func (s *Server) jobsList(ctx context.Context, before string) (views.Jobs, error) {
	list, total, err := s.deps.Jobs.List(ctx, jobs.ListOptions{Limit: jobsPerPage + 1, Before: before})
	if err != nil {
		return views.Jobs{}, err
	}
	more := len(list) > jobsPerPage
	list = list[:min(len(list), jobsPerPage)]
	now := time.Now()
	out := views.Jobs{Total: total, Older: before != ""}
	for _, j := range list {
		end := now
		if j.Ended() && !j.Finished.IsZero() {
			end = j.Finished
		}
		state := views.StateOf(j.State)
		if _, ok := j.RolledBack(); ok {
			state = views.StateOf(jobs.RolledBack)
		}
		outcome, why := jobOutcome(j)
		out.Rows = append(out.Rows, views.JobRow{
			ID: j.ID, URL: "/jobs/" + url.PathEscape(j.ID), Model: or(j.Model, j.Request.Name, j.Request.Repo),
			Repo: j.Request.Repo, Kind: j.Kind, State: state, Step: or(j.EndStep(), "—"), Outcome: outcome, Why: why,
			Started: timeText(j.Started, now), StartedISO: j.Started.UTC().Format(time.RFC3339),
			Took: durationText(end.Sub(j.Started)),
		})
	}
	if before != "" {
		out.Newest = "/jobs"
	}
	if more {
		out.Next = "/jobs?" + url.Values{"before": {list[len(list)-1].ID}}.Encode()
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

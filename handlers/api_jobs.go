package handlers

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"

	"modelserve/internal/operr"
	"modelserve/jobs"
)

// apiServe starts a job: 202 with the job, or 400 with the sentence saying
// what is wrong with the request.
func (s *Server) apiServe(w http.ResponseWriter, r *http.Request) {
	req, err := decodeServe(w, r)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	j, err := s.deps.Jobs.Start(r.Context(), req)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	w.Header().Set("Location", "/api/v1/jobs/"+j.ID)
	writeJSON(w, http.StatusAccepted, j)
}

// decodeServe reads POST /api/v1/serve's body. A request that leaves out
// replicas gets one, as the console's form does: in jobs.Request a missing
// field and 0 (on demand) are the same, and a script that names no number
// means "serve it", not "add it and start nothing".
func decodeServe(w http.ResponseWriter, r *http.Request) (jobs.Request, error) {
	var raw json.RawMessage
	if err := decodeJSON(w, r, &raw); err != nil {
		return jobs.Request{}, err
	}
	var req jobs.Request
	if err := json.Unmarshal(raw, &req); err != nil {
		return jobs.Request{}, badRequest("the request body is not the JSON expected: " + bodyProblem(err))
	}
	var given struct {
		Replicas *int `json:"replicas"`
	}
	if err := json.Unmarshal(raw, &given); err == nil && given.Replicas == nil {
		req.Replicas = 1
	}
	return req, nil
}

// apiJobList pages through jobs, newest first: ?limit= (default 50, at most
// 500), and ?before= (a job's id: the jobs older than it) or ?offset=. The
// answer's next is the URL of the page after it, by before: a cursor costs
// the same at any depth and does not shift as new jobs start, where an
// offset reads every job it skips.
func (s *Server) apiJobList(w http.ResponseWriter, r *http.Request) {
	limit, offset, err := paging(r)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	before := r.URL.Query().Get("before")
	list, total, err := s.deps.Jobs.List(r.Context(), jobs.ListOptions{Limit: limit, Offset: offset, Before: before})
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	out := map[string]any{"jobs": list, "total": total, "limit": limit, "offset": offset}
	if before != "" {
		out["before"] = before
	}
	if len(list) == limit {
		// A full page may have more after it; the next one says if not.
		out["next"] = "/api/v1/jobs?" + url.Values{"limit": {strconv.Itoa(limit)}, "before": {list[len(list)-1].ID}}.Encode()
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) apiJobShow(w http.ResponseWriter, r *http.Request) {
	j, err := s.deps.Jobs.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, j)
}

func (s *Server) apiJobCancel(w http.ResponseWriter, r *http.Request) {
	j, err := s.deps.Jobs.Cancel(r.Context(), r.PathValue("id"))
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, j)
}

func (s *Server) apiJobRetry(w http.ResponseWriter, r *http.Request) {
	j, err := s.deps.Jobs.Retry(r.Context(), r.PathValue("id"))
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	w.Header().Set("Location", "/api/v1/jobs/"+j.ID)
	writeJSON(w, http.StatusAccepted, j)
}

func paging(r *http.Request) (limit, offset int, err error) {
	if limit, err = pageLimit(r, 50); err != nil {
		return 0, 0, err
	}
	if v := r.URL.Query().Get("offset"); v != "" {
		if offset, err = strconv.Atoi(v); err != nil || offset < 0 {
			return 0, 0, badRequest("offset is a whole number from 0, not " + operr.Quote(v))
		}
	}
	return limit, offset, nil
}

// pageLimit is ?limit=, a page's length: def when not asked, at most 500.
func pageLimit(r *http.Request, def int) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, nil
	}
	limit, err := strconv.Atoi(v)
	if err != nil || limit < 1 || limit > 500 {
		return 0, badRequest("limit is a whole number from 1 to 500, not " + operr.Quote(v))
	}
	return limit, nil
}

package handlers

import (
	"net/http"
	"strconv"

	"modelserve/jobs"
)

// apiServe starts a job: 202 with the job, or 400 with the sentence saying
// what is wrong with the request.
func (s *Server) apiServe(w http.ResponseWriter, r *http.Request) {
	var req jobs.Request
	if err := decodeJSON(w, r, &req); err != nil {
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

// apiJobList pages through jobs, newest first: ?limit= (default 50, at most
// 500) and ?offset=.
func (s *Server) apiJobList(w http.ResponseWriter, r *http.Request) {
	limit, offset, err := paging(r)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	list, total, err := s.deps.Jobs.List(r.Context(), jobs.ListOptions{Limit: limit, Offset: offset})
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": list, "total": total, "limit": limit, "offset": offset})
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
	limit, offset = 50, 0
	if v := r.URL.Query().Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 500 {
			return 0, 0, badRequest("limit is a whole number from 1 to 500, not " + strconv.Quote(v))
		}
	}
	if v := r.URL.Query().Get("offset"); v != "" {
		if offset, err = strconv.Atoi(v); err != nil || offset < 0 {
			return 0, 0, badRequest("offset is a whole number from 0, not " + strconv.Quote(v))
		}
	}
	return limit, offset, nil
}

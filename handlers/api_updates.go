package handlers

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

	"modelserve/internal/operr"
	"modelserve/internal/updates"
)

// apiModelCheck is POST /api/v1/catalog/{name}/check: the model's branch
// checked now, answered with what the check found (200), or with the
// sentence of why it could not be checked: 404 for a model the catalog
// does not have, 409 for one pinned to a commit or a tag, and the
// registry's refusal with its own status (the failure is also the model's
// last check).
func (s *Server) apiModelCheck(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	res, err := s.deps.Updates.Check(r.Context(), name)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	s.deps.Log.Info("model checked for new weights through the API", "model", name, "result", res.Result)
	writeJSON(w, http.StatusOK, res)
}

// apiModelUpdates is GET /api/v1/catalog/{name}/updates: whether the model
// is watched (and why not), its interval, its last check, and the update
// available to it.
func (s *Server) apiModelUpdates(w http.ResponseWriter, r *http.Request) {
	st, err := s.deps.Updates.Status(r.Context(), r.PathValue("name"))
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// intervalBody is PUT /api/v1/catalog/{name}/updates's body: the model's
// settings, each left out taking its default.
type intervalBody struct {
	// Interval is "6h", "30m" or "0" (never); null or left out returns
	// the model to the server's default.
	Interval *string `json:"interval"`
	// Policy is "manual" (left out) or "auto": each update noticed is
	// tried at once.
	Policy string `json:"policy"`
	// InPlace false refuses an update with no room beside the model
	// rather than replace its replica in place; left out, it may.
	InPlace *bool `json:"in_place"`
}

// apiModelUpdatesSet is PUT /api/v1/catalog/{name}/updates with
// {"interval": "1h"}: 200 and the model's status as it now is.
func (s *Server) apiModelUpdatesSet(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var b intervalBody
	if err := decodeJSON(w, r, &b); err != nil {
		s.apiError(w, r, err)
		return
	}
	var d *time.Duration
	if b.Interval != nil {
		v, err := updates.ParseInterval(*b.Interval)
		if err != nil {
			s.apiError(w, r, err)
			return
		}
		d = &v
	}
	st, err := s.deps.Updates.SetSettings(r.Context(), name, d, b.Policy, b.InPlace == nil || *b.InPlace)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	s.deps.Log.Info("update settings set through the API", "model", name, "interval", st.Interval, "own", st.IntervalSet, "policy", st.Policy, "in_place", st.InPlace)
	writeJSON(w, http.StatusOK, st)
}

// apiUpdateList is GET /api/v1/updates: updates, newest first; ?model= keeps
// one model's, ?limit= (default 50, at most 500) and ?before= (an update's
// id: those older than it) page them. A full page has next, the URL of the
// page after it.
func (s *Server) apiUpdateList(w http.ResponseWriter, r *http.Request) {
	limit, _, err := paging(r)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	q := r.URL.Query()
	if q.Has("offset") {
		s.apiError(w, r, badRequest("updates are paged by before (an update's id), not by offset: follow the answer's next"))
		return
	}
	o := updates.ListOptions{Model: q.Get("model"), Limit: limit}
	if v := q.Get("before"); v != "" {
		if o.Before, err = strconv.ParseInt(v, 10, 64); err != nil || o.Before < 1 {
			s.apiError(w, r, badRequest("before is an update's id, a whole number from 1, not "+operr.Quote(v)))
			return
		}
	}
	list, err := s.deps.Updates.List(r.Context(), o)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	out := map[string]any{"updates": list, "limit": limit}
	if len(list) == limit {
		next := url.Values{"limit": {strconv.Itoa(limit)}, "before": {strconv.FormatInt(list[len(list)-1].ID, 10)}}
		if o.Model != "" {
			next.Set("model", o.Model)
		}
		out["next"] = "/api/v1/updates?" + next.Encode()
	}
	writeJSON(w, http.StatusOK, out)
}

// apiUpdateShow is GET /api/v1/updates/{id}.
func (s *Server) apiUpdateShow(w http.ResponseWriter, r *http.Request) {
	id, err := updateID(r.PathValue("id"))
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	u, err := s.deps.Updates.Get(r.Context(), id)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, u)
}

// updateID reads an update's id from a path.
func updateID(v string) (int64, error) {
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id < 1 {
		return 0, operr.New(operr.NotFound, "there is no update %s: an update's id is a whole number; GET /api/v1/updates lists them", operr.Quote(v))
	}
	return id, nil
}

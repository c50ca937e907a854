package handlers

import (
	"net/http"

	"modelserve/catalog"
	"modelserve/jobs"
)

// apiModelVersions answers GET /api/v1/catalog/{name}/versions: the
// versions the model has run or tried, newest first, each with its
// figures (versionFigures), and its canary on trial now, if any, with the
// share of requests it takes.
func (s *Server) apiModelVersions(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if _, err := s.deps.Catalog.Get(r.Context(), name); err != nil {
		s.apiError(w, r, err)
		return
	}
	versions, err := s.versionHistory(r.Context(), name)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	out := map[string]any{"model": name, "versions": versions}
	if c, ok := s.canaryOf(r, name); ok {
		out["canary"] = map[string]any{"name": c.Name, "commit": c.Origin.Revision, "share": c.Canary.Share}
	}
	writeJSON(w, http.StatusOK, out)
}

// canaryOf is model's canary entry, when one is on trial.
func (s *Server) canaryOf(r *http.Request, model string) (catalog.Model, bool) {
	all, err := s.deps.Catalog.List(r.Context())
	if err != nil {
		return catalog.Model{}, false
	}
	for _, m := range all {
		if m.Canary != nil && m.Canary.Of == model && m.Origin != nil {
			return m, true
		}
	}
	return catalog.Model{}, false
}

// apiModelUpdate answers POST /api/v1/catalog/{name}/update: a job serving
// the model's update beside it, as its canary, and judging it. The body
// may name the update ({"update_id": 7}; the newest available otherwise)
// and the canary's share of the model's requests ({"share": 0.1}).
func (s *Server) apiModelUpdate(w http.ResponseWriter, r *http.Request) {
	var body struct {
		UpdateID int64   `json:"update_id"`
		Share    float64 `json:"share"`
	}
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, &body); err != nil {
			s.apiError(w, r, err)
			return
		}
	}
	j, err := s.deps.Jobs.Update(r.Context(), jobs.UpdateRequest{Model: r.PathValue("name"), UpdateID: body.UpdateID, Share: body.Share})
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	w.Header().Set("Location", "/api/v1/jobs/"+j.ID)
	writeJSON(w, http.StatusAccepted, j)
}

// apiModelPromote answers POST /api/v1/catalog/{name}/promote: the version
// on trial becomes the model, as an operator decides; the answer is the
// update's job once it has ended.
func (s *Server) apiModelPromote(w http.ResponseWriter, r *http.Request) {
	j, err := s.deps.Jobs.Promote(r.Context(), r.PathValue("name"), "an operator")
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, j)
}

// apiModelRollBack answers POST /api/v1/catalog/{name}/rollback: the
// version on trial stops, and the model serves on as it did.
func (s *Server) apiModelRollBack(w http.ResponseWriter, r *http.Request) {
	j, err := s.deps.Jobs.RollBack(r.Context(), r.PathValue("name"), "an operator")
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, j)
}

// apiVersionRestore answers POST /api/v1/catalog/{name}/versions/{id}/restore:
// a job serving that version of the model again (202), its replicas
// restarting on it while it takes every request.
func (s *Server) apiVersionRestore(w http.ResponseWriter, r *http.Request) {
	j, err := s.restoreJob(r.Context(), r.PathValue("name"), r.PathValue("id"), "an operator")
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	w.Header().Set("Location", "/api/v1/jobs/"+j.ID)
	writeJSON(w, http.StatusAccepted, j)
}

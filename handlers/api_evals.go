package handlers

import (
	"errors"
	"io"
	"net/http"
	"strconv"

	"modelserve/internal/evals"
	"modelserve/internal/operr"
)

// apiEvalRuns is how many of a model's newest runs its evals answer lists.
const apiEvalRuns = 20

// evalsBody is a model's evals as the API answers them: its suite as PUT
// takes it (model, suite, digest, updated_at, updated_by) and its newest
// runs, newest first, without their results.
type evalsBody struct {
	evals.Stored
	Runs []evals.Run `json:"runs"`
}

// apiEvalsShow is GET /api/v1/catalog/{name}/evals: the model's suite and
// its newest runs; 404 for a model the catalog does not have.
func (s *Server) apiEvalsShow(w http.ResponseWriter, r *http.Request) {
	st, err := s.deps.Evals.Suite(r.Context(), r.PathValue("name"))
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	s.writeEvals(w, r, http.StatusOK, st)
}

// apiEvalsSet is PUT /api/v1/catalog/{name}/evals with a suite
// ({"cases": [...]}): the suite replaced, answered as GET answers; an
// empty list of cases removes it. A suite refused (400, the sentence
// naming the case and the field) changes nothing; 404 for a model the
// catalog does not have.
func (s *Server) apiEvalsSet(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, evals.MaxSuiteBytes))
	if err != nil {
		var big *http.MaxBytesError
		if errors.As(err, &big) {
			s.apiError(w, r, badRequest("the suite is larger than 1 MiB: split it, or drop cases"))
			return
		}
		s.apiError(w, r, badRequest("the request body could not be read whole: send the suite again"))
		return
	}
	st, err := s.deps.Evals.SetSuite(r.Context(), name, data, "token "+tokenName(r.Context()))
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	s.deps.Log.Info("eval suite set through the API", "model", name, "cases", len(st.Suite.Cases), "digest", st.Digest)
	s.writeEvals(w, r, http.StatusOK, st)
}

// writeEvals answers with st and the model's newest runs.
func (s *Server) writeEvals(w http.ResponseWriter, r *http.Request, status int, st evals.Stored) {
	runs, err := s.deps.Evals.Runs(r.Context(), st.Model, apiEvalRuns)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, status, evalsBody{Stored: st, Runs: runs})
}

// apiEvalsRun is POST /api/v1/catalog/{name}/evals/run: the model's suite
// run now against the model itself. It answers 202 with the run as it
// starts (state running) and its URL in Location, rather than waiting: a
// run takes up to its bound of 15 minutes (a hundred cases of a large
// model on a CPU), longer than an HTTP client or a proxy in front of
// modelserve waits for an answer, and GET /api/v1/evals/runs/{id} shows
// its results as each case is judged. 404 for a model the catalog does
// not have; 409 for one with no suite, or with a run under way.
func (s *Server) apiEvalsRun(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	run, err := s.deps.Evals.Start(r.Context(), name, name)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	s.deps.Log.Info("eval run started through the API", "model", name, "run", run.ID)
	w.Header().Set("Location", "/api/v1/evals/runs/"+strconv.FormatInt(run.ID, 10))
	writeJSON(w, http.StatusAccepted, run)
}

// apiEvalRunShow is GET /api/v1/evals/runs/{id}: one run with each case's
// result, in the suite's order.
func (s *Server) apiEvalRunShow(w http.ResponseWriter, r *http.Request) {
	id, err := evalRunID(r.PathValue("id"))
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	run, err := s.deps.Evals.Get(r.Context(), id)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, run)
}

// evalRunID reads an eval run's id from a path.
func evalRunID(v string) (int64, error) {
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id < 1 {
		return 0, operr.New(operr.NotFound, "there is no eval run %s: a run's id is a whole number; GET /api/v1/catalog/{name}/evals lists a model's runs", operr.Quote(v))
	}
	return id, nil
}

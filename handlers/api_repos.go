package handlers

import (
	"modelserve/catalog"
	"modelserve/internal/operr"
	"net/http"
	"strconv"
	"strings"

	"modelserve/internal/hf"
	"modelserve/internal/plan"
)

// apiRepo is the serve page's report as JSON: GET
// /api/v1/repos/{owner}/{name}?revision=&context_length=&ctx_pool= — the
// files, the sets, and with a planner where each fits. context_length and
// ctx_pool mean what they mean in POST /api/v1/serve's body (the tokens of
// one request, and the pool the engine holds), and are shaped into a size
// as a job shapes them, so that a plan says "fits" for what a serve of the
// same figures then runs; context is ctx_pool's older name.
func (s *Server) apiRepo(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("owner") + "/" + r.PathValue("name")
	rev := or(strings.TrimSpace(r.URL.Query().Get("revision")), "main")
	var ask plan.Ask
	for _, q := range []struct {
		name string
		to   *int
	}{{"context", &ask.CtxPool}, {"ctx_pool", &ask.CtxPool}, {"context_length", &ask.ContextLength}} {
		v := r.URL.Query().Get(q.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			s.apiError(w, r, badRequest(q.name+" is a whole number of tokens, 0 or more, not "+operr.Quote(v)))
			return
		}
		*q.to = n
	}
	var size catalog.Size
	if ask.Sized() {
		size = ask.Shape()
	}
	if err := hf.CheckRepoID(id); err != nil {
		s.apiError(w, r, badRequest(operr.Quote(id)+" is not a repository; it looks like owner/name, or local/<folder>"))
		return
	}
	repo, err := s.deps.Registry.Repo(r.Context(), id, rev)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	out := struct {
		plan.Report
		// DownloadRefused is the registry's sentence when its token may
		// not download the files of a gated repository.
		DownloadRefused string `json:"download_refused,omitempty"`
	}{Report: unplannedReport(repo)}
	if dc, ok := s.deps.Registry.(downloadChecker); ok && (repo.Gated != "" || repo.Private) {
		if err := dc.CanDownload(r.Context(), repo, hf.FirstWeights(repo)); err != nil {
			if _, said := operatorStatus(err); !said {
				s.apiError(w, r, err)
				return
			}
			out.DownloadRefused, _ = operr.Sentence(err)
		}
	}
	if s.deps.Planner != nil {
		rep, err := s.deps.Planner.RepoReport(r.Context(), repo, plan.Request{Size: size})
		if err != nil {
			if r.Context().Err() != nil {
				return
			}
			s.apiError(w, r, err)
			return
		}
		out.Report = rep
	}
	writeJSON(w, http.StatusOK, out)
}

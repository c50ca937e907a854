package handlers

import (
	"context"
	"net/url"
	"strconv"

	"modelserve/catalog"
	"modelserve/internal/evals"
	"modelserve/internal/operr"
	"modelserve/jobs"
)

// versionRuns is how many of a model's newest eval runs are read for its
// versions' results.
const versionRuns = 200

// versionFigures is one version of a model with what was measured of it:
// the API's and the history page's, from one reading.
type versionFigures struct {
	catalog.Version
	// TokensPerSecond is what the smoke test of the newest job that
	// served the version measured, and MeasuredBy that job; 0 and "" when
	// none did.
	TokensPerSecond float64 `json:"tokens_per_second,omitempty"`
	MeasuredBy      string  `json:"measured_by,omitempty"`
	// MemoryBytes is what a replica of it was placed by (its profile's
	// RAM); RSSBytes what one running now holds, measured, 0 when none
	// runs.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	RSSBytes    int64 `json:"rss_bytes,omitempty"`
	// Eval is the newest finished run of the model's suite against the
	// version, nil when none ran.
	Eval *evals.Run `json:"eval,omitempty"`
	// Restore is where to POST to serve the version again, "" for the
	// version serving now or on trial.
	Restore string `json:"restore,omitempty"`
}

// versionHistory is model's versions, newest first, each with its
// figures. What cannot be read of the figures (the jobs, the runs) costs
// them and is logged; the versions themselves are the answer's.
func (s *Server) versionHistory(ctx context.Context, model string) ([]versionFigures, error) {
	out := []versionFigures{}
	if s.deps.Versions == nil {
		return out, nil
	}
	vs, err := s.deps.Versions.Versions(ctx, model)
	if err != nil {
		return nil, err
	}
	all, err := s.deps.Catalog.List(ctx)
	if err != nil {
		return nil, err
	}
	measured := s.measured(ctx, all)
	runs, err := s.deps.Evals.Runs(ctx, model, versionRuns)
	if err != nil && ctx.Err() == nil {
		s.deps.Log.Error("reading a model's eval runs for its versions", "model", model, "err", err)
	}
	rss := map[string]int64{}
	if snap, ok := s.snapshot(); ok {
		for _, r := range snap.replicas {
			rss[r.Model] = max(rss[r.Model], r.RSSBytes)
		}
	}
	for _, v := range vs {
		f := versionFigures{Version: v, MemoryBytes: v.Profile.RAMBytes}
		if j, ok := measured[versionKey{model, v.Commit}]; ok {
			f.TokensPerSecond, f.MeasuredBy = j.TokensPerSecond, j.ID
		}
		for _, r := range runs { // newest first
			if r.Commit == v.Commit && r.State == evals.StateDone {
				f.Eval = &r
				break
			}
		}
		switch v.State {
		case catalog.VersionCurrent:
			f.RSSBytes = rss[model]
		case catalog.VersionCanary:
			f.RSSBytes = rss[catalog.CanaryName(model, v.Commit)]
		default:
			f.Restore = "/api/v1/catalog/" + url.PathEscape(model) + "/versions/" + strconv.FormatInt(v.ID, 10) + "/restore"
		}
		out = append(out, f)
	}
	return out, nil
}

// restoreJob is the handlers' call for a restore, from the API or the
// console: the version's id from the path, checked, then the job.
func (s *Server) restoreJob(ctx context.Context, model, id, by string) (jobs.Job, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n < 1 {
		return jobs.Job{}, operr.New(operr.NotFound, "%s has no version %s: a version's id is a whole number; GET /api/v1/catalog/%s/versions lists them",
			model, operr.Quote(id), model)
	}
	return s.deps.Jobs.Restore(ctx, model, n, by)
}

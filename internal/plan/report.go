package plan

import (
	"context"

	"modelserve/internal/hf"
)

// Report is the whole answer of `GET /api/v1/repos/{owner}/{name}`: what
// the repository holds and the plan for it, so the handler only serialises.
type Report struct {
	Repo     string `json:"repo"`
	Revision string `json:"revision"`
	Commit   string `json:"commit"`
	// Gated says an account needs approval to download the files;
	// GatedMode is the registry's "auto" or "manual".
	Gated     bool   `json:"gated"`
	GatedMode string `json:"gated_mode,omitempty"`
	Private   bool   `json:"private,omitempty"`
	// Sets are the GGUF sets and the original weights, each with its
	// options, best first.
	Sets []ReportSet `json:"sets"`
	// Projectors are the vision projectors a GGUF file can be served with.
	Projectors []hf.File `json:"projectors"`
	Plan       Plan      `json:"plan"`
}

// ReportSet is one artifact of the repository and where it can run.
type ReportSet struct {
	SetPlan
	Options []Option `json:"options"`
	// Recommended marks the file served when none is named.
	Recommended bool `json:"recommended"`
}

// RepoReport plans a repository and lays the plan out per artifact.
func (p *Planner) RepoReport(ctx context.Context, repo hf.Repo, req Request) (Report, error) {
	pl, err := p.Plan(ctx, repo, req)
	if err != nil {
		return Report{}, err
	}
	r := Report{
		Repo: repo.ID, Revision: repo.Revision, Commit: repo.Commit,
		Gated: repo.Gated != "", GatedMode: repo.Gated, Private: repo.Private,
		Sets: make([]ReportSet, 0, len(pl.Sets)), Projectors: hf.Projectors(repo.Files), Plan: pl,
	}
	if r.Projectors == nil {
		r.Projectors = []hf.File{}
	}
	rec, ok := pl.Recommended()
	for _, s := range pl.Sets {
		name := s.Name
		if s.Format == FormatSafetensors {
			name = Original
		}
		var opts []Option
		if s.Planned {
			opts = pl.For(name)
		}
		if opts == nil {
			opts = []Option{}
		}
		r.Sets = append(r.Sets, ReportSet{SetPlan: s, Options: opts,
			Recommended: ok && s.Format == FormatGGUF && rec.Artifact == s.Name})
	}
	return r, nil
}

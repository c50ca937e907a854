package handlers

import (
	"context"
	"modelserve/internal/operr"
	"sync"
	"time"

	"modelserve/internal/hf"
	"modelserve/internal/plan"
)

// Registry reads a repository at a revision (hf.Client, hf.Local,
// hf.Registries): the serve page and GET /api/v1/repos/ show what it holds.
type Registry interface {
	Repo(ctx context.Context, id, revision string) (hf.Repo, error)
}

// downloadChecker is a registry that can tell whether its token may
// download a gated repository's files (hf.Client), which the Hub refuses
// while it lists them to anyone.
type downloadChecker interface {
	CanDownload(ctx context.Context, repo hf.Repo, path string) error
}

// Planner lays a repository's files out on the pool (plan.Planner).
type Planner interface {
	RepoReport(ctx context.Context, repo hf.Repo, req plan.Request) (plan.Report, error)
}

// Pool is the hardware a plan is made for: the fleet's nodes (fleet.Fleet.Pool).
type Pool interface {
	Nodes() []plan.Node
}

// lookup is a repository as read and planned, for the serve page.
type lookup struct {
	repo    hf.Repo
	report  plan.Report
	planned bool
	// gatedNote is the registry's sentence when its token may not
	// download the files.
	gatedNote string
	at        time.Time
}

// The serve page asks for the same repository again with each file chosen
// and each change of the context, a fraction of a second apart; a registry
// answer (and a plan of the pool as it was) is good for that long.
const (
	lookupTTL  = 30 * time.Second
	maxLookups = 32
)

type lookups struct {
	mu sync.Mutex
	m  map[string]*lookup
}

func (c *lookups) get(key string) *lookup {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.m[key]; l != nil && time.Since(l.at) < lookupTTL {
		return l
	}
	return nil
}

func (c *lookups) put(key string, l *lookup) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*lookup{}
	}
	if len(c.m) >= maxLookups {
		for k, old := range c.m {
			if time.Since(old.at) >= lookupTTL || len(c.m) >= maxLookups {
				delete(c.m, k)
			}
		}
	}
	c.m[key] = l
}

// lookUp reads and plans a repository, or returns it from a moment ago.
func (s *Server) lookUp(ctx context.Context, id, revision string) (*lookup, error) {
	key := id + "@" + revision
	if l := s.lookups.get(key); l != nil {
		return l, nil
	}
	repo, err := s.deps.Registry.Repo(ctx, id, revision)
	if err != nil {
		return nil, err
	}
	l := &lookup{repo: repo, at: time.Now()}
	if dc, ok := s.deps.Registry.(downloadChecker); ok && (repo.Gated != "" || repo.Private) {
		if err := dc.CanDownload(ctx, repo, hf.FirstWeights(repo)); err != nil {
			switch _, said := operatorStatus(err); {
			case said:
				l.gatedNote, _ = operr.Sentence(err)
			case ctx.Err() != nil:
				return nil, ctx.Err()
			default:
				s.deps.Log.Warn("asking the registry whether a gated repository may be downloaded", "repo", id, "err", err)
				l.gatedNote = "the registry did not say whether its token may download these files; a job will find out"
			}
		}
	}
	if s.deps.Planner == nil {
		l.report = unplannedReport(repo)
	} else {
		rep, err := s.deps.Planner.RepoReport(ctx, repo, plan.Request{})
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		l.report, l.planned = rep, true
	}
	s.lookups.put(key, l)
	return l, nil
}

// unplannedReport is what a repository holds without a planner: its GGUF
// sets and its original weights, with no options.
func unplannedReport(repo hf.Repo) plan.Report {
	holds := hf.Holds(repo)
	r := plan.Report{
		Repo: repo.ID, Revision: repo.Revision, Commit: repo.Commit, Gated: repo.Gated != "",
		GatedMode: repo.Gated, Private: repo.Private, Sets: []plan.ReportSet{}, Projectors: holds.Projectors,
	}
	if r.Projectors == nil {
		r.Projectors = []hf.File{}
	}
	add := func(set hf.FileSet, format string) {
		r.Sets = append(r.Sets, plan.ReportSet{
			SetPlan: plan.SetPlan{FileSet: set, Format: format, Planned: len(set.Missing) == 0},
			Options: []plan.Option{},
		})
	}
	for _, set := range holds.GGUF {
		add(set, plan.FormatGGUF)
	}
	if holds.Original != nil {
		add(*holds.Original, plan.FormatSafetensors)
	}
	return r
}

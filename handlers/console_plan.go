package handlers

import (
	"context"
	"net/http"
	"strconv"
	"strings"
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

// Pool is the hardware a plan is made for (plan.Pool).
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

// planRefusal is the planner's refusal of a repository ("has neither GGUF
// files nor safetensors weights"): the planner writes each as a sentence,
// and reading a file's header, the one thing that fails for other reasons,
// becomes a note on the plan rather than an error.
type planRefusal struct{ err error }

func (e planRefusal) Error() string   { return e.err.Error() }
func (e planRefusal) Unwrap() error   { return e.err }
func (e planRefusal) HTTPStatus() int { return http.StatusUnprocessableEntity }

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
		if err := dc.CanDownload(ctx, repo, firstWeights(repo)); err != nil {
			switch _, said := registryStatus(err); {
			case said:
				l.gatedNote = err.Error()
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
			return nil, planRefusal{err}
		}
		l.report, l.planned = rep, true
	}
	s.lookups.put(key, l)
	return l, nil
}

// unplannedReport is what a repository holds without a planner: its GGUF
// sets and its original weights, with no options.
func unplannedReport(repo hf.Repo) plan.Report {
	r := plan.Report{
		Repo: repo.ID, Revision: repo.Revision, Commit: repo.Commit, Gated: repo.Gated != "",
		GatedMode: repo.Gated, Private: repo.Private, Sets: []plan.ReportSet{}, Projectors: hf.Projectors(repo.Files),
	}
	if r.Projectors == nil {
		r.Projectors = []hf.File{}
	}
	for _, set := range hf.Group(repo.Files) {
		first := strings.ToLower(set.Files[0].Path)
		format := plan.FormatGGUF
		if strings.HasSuffix(first, ".safetensors") {
			// Original weights are the ones at the top; copies in folders
			// are other variants.
			if strings.Contains(first, "/") {
				continue
			}
			format = plan.FormatSafetensors
		}
		r.Sets = append(r.Sets, plan.ReportSet{
			SetPlan: plan.SetPlan{FileSet: set, Format: format, Planned: len(set.Missing) == 0},
			Options: []plan.Option{},
		})
	}
	return r
}

// firstWeights is the file whose download a gated repository is asked
// about: its first GGUF weights, else its first file.
func firstWeights(repo hf.Repo) string {
	for _, set := range hf.Group(repo.Files) {
		return set.Files[0].Path
	}
	if len(repo.Files) > 0 {
		return repo.Files[0].Path
	}
	return ""
}

// apiRepo is the serve page's report as JSON: GET
// /api/v1/repos/{owner}/{name}?revision=&context= — the files, the sets,
// and with a planner where each fits.
func (s *Server) apiRepo(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("owner") + "/" + r.PathValue("name")
	rev := or(strings.TrimSpace(r.URL.Query().Get("revision")), "main")
	tokens := 0
	if q := r.URL.Query().Get("context"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 0 {
			s.apiError(w, r, badRequest("context is a whole number of tokens, 0 or more, not "+strconv.Quote(q)))
			return
		}
		tokens = n
	}
	if err := hf.CheckRepoID(id); err != nil {
		s.apiError(w, r, badRequest(strconv.Quote(id)+" is not a repository; it looks like owner/name, or local/<folder>"))
		return
	}
	repo, err := s.deps.Registry.Repo(r.Context(), id, rev)
	if err != nil {
		if status, ok := registryStatus(err); ok {
			writeJSON(w, status, errorBody{Error: err.Error()})
			return
		}
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
		if err := dc.CanDownload(r.Context(), repo, firstWeights(repo)); err != nil {
			if _, said := registryStatus(err); !said {
				s.apiError(w, r, err)
				return
			}
			out.DownloadRefused = err.Error()
		}
	}
	if s.deps.Planner != nil {
		rep, err := s.deps.Planner.RepoReport(r.Context(), repo, plan.Request{Context: tokens})
		if err != nil {
			if r.Context().Err() != nil {
				return
			}
			s.apiError(w, r, planRefusal{err})
			return
		}
		out.Report = rep
	}
	writeJSON(w, http.StatusOK, out)
}

package handlers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"modelserve/catalog"
	"modelserve/internal/hf"
	"modelserve/internal/plan"
	"modelserve/internal/words"
	"modelserve/jobs"
	"modelserve/views"
)

// speedJobs is how many of the newest jobs are read for the models'
// measured speeds: the smoke test of the newest that served each.
const speedJobs = 500

// measuredTTL is how long the measured speeds, and the mirror's file
// sizes the estimates are made from, are kept before they are read again.
// Reading 500 jobs with their steps took 22 ms where the rest of the
// catalog page took 0.7, and listing the mirror walks its folder and reads
// a sidecar a file: the catalog's and the fleet's streams, each client's,
// paid both at every change of the catalog (a hundred jobs at once, one
// change each), for figures that change only when a job ends.
const measuredTTL = 10 * time.Second

// keptRead is one figure the console reads from outside memory (the jobs,
// the mirror's folder), kept and shared by every page and stream: read
// again once measuredTTL has passed, or when a model of those it is asked
// for was added to the catalog after it was read, whose figure may be new.
// One reads at a time; the others wait for its reading. What cannot be
// read leaves the last reading standing.
type keptRead[T any] struct {
	mu   sync.Mutex
	at   time.Time // when the reading kept began
	v    T
	read bool
}

func (k *keptRead[T]) get(models []catalog.Model, read func() (T, error)) (T, error) {
	var added time.Time
	for _, m := range models {
		if m.AddedAt.After(added) {
			added = m.AddedAt
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.read && time.Since(k.at) < measuredTTL && !k.at.Before(added) {
		return k.v, nil
	}
	began := time.Now()
	v, err := read()
	if err != nil {
		return k.v, err
	}
	k.v, k.at, k.read = v, began, true
	return v, nil
}

// measures are the newest job of each version of each model with a
// measured speed (measured), and the mirror's files' sizes by model,
// revision and path (speeds).
type measures struct {
	jobs  keptRead[map[versionKey]jobs.Job]
	sizes keptRead[map[[3]string]int64]
}

// versionKey names one version of a model: its catalog name (a canary's
// is its model's) and the commit it runs. A commit of "" stands for the
// newest of any commit, for a model added without an origin.
type versionKey struct{ model, commit string }

// versionOf is the key of the version m's entry serves.
func versionOf(m catalog.Model) versionKey {
	k := versionKey{model: m.Name}
	if m.Canary != nil {
		k.model = m.Canary.Of
	}
	if m.Origin != nil {
		k.commit = m.Origin.Revision
	}
	return k
}

// measuredOf is what the version m's entry serves measured, if anything:
// the row of a model promoted to a new version shows the new version's
// speed, not the one its first serve measured.
func measuredOf(measured map[versionKey]jobs.Job, m catalog.Model) (jobs.Job, bool) {
	j, ok := measured[versionOf(m)]
	return j, ok
}

// measured is the newest job with a measured speed of each version of
// each model, read again once measuredTTL has passed, or when one of
// models was added to the catalog since they were read: its job may have
// measured it since, and the serve page, read as the job ran, must not
// hide the figure from the catalog opened as it ends. An update's job
// measured its model's new version, whatever its trial then decided. What
// cannot be read is logged, and the figures read last stand.
func (s *Server) measured(ctx context.Context, models []catalog.Model) map[versionKey]jobs.Job {
	out, err := s.measures.jobs.get(models, func() (map[versionKey]jobs.Job, error) {
		list, _, err := s.deps.Jobs.List(ctx, jobs.ListOptions{Limit: speedJobs})
		if err != nil {
			return nil, err
		}
		out := map[versionKey]jobs.Job{}
		for _, j := range list { // newest first
			model := or(j.Request.CanaryOf, j.Model)
			if j.TokensPerSecond <= 0 || model == "" {
				continue
			}
			for _, k := range []versionKey{{model, j.Commit}, {model, ""}} {
				if _, seen := out[k]; !seen {
					out[k] = j
				}
			}
		}
		return out, nil
	})
	if err != nil && ctx.Err() == nil {
		s.deps.Log.Error("reading the jobs for the models' measured speeds", "err", err)
	}
	return out
}

// speeds are each model's tokens a second, by name: the plan's estimate
// (what the serve page showed, and what it is from) and, once a job has
// served the model, what its smoke test measured beside it. An embedding
// model generates no tokens and has neither. What cannot be read (the
// jobs, the mirror) costs the figures it would have given and is logged.
func (s *Server) speeds(ctx context.Context, models []catalog.Model) map[string]views.Speed {
	measured := s.measured(ctx, models)
	var sizes map[[3]string]int64
	if s.deps.Mirror != nil {
		var err error
		sizes, err = s.measures.sizes.get(models, func() (map[[3]string]int64, error) {
			files, err := s.deps.Mirror.List(ctx)
			if err != nil {
				return nil, err
			}
			sizes := make(map[[3]string]int64, len(files))
			for _, f := range files {
				sizes[[3]string{f.Model, f.Revision, f.Path}] = f.Size
			}
			return sizes, nil
		})
		if err != nil && ctx.Err() == nil {
			s.deps.Log.Error("reading the mirror for the models' estimated speeds", "err", err)
		}
	}
	var pool []plan.Node
	if s.deps.Pool != nil {
		pool = s.deps.Pool.Nodes()
	}
	out := make(map[string]views.Speed, len(models))
	for _, m := range models {
		if m.Capabilities.Embeddings {
			continue
		}
		var sp views.Speed
		if w := weightsBytes(m, sizes); w > 0 && len(m.Profiles) > 0 {
			if tps, bw := plan.ServedSpeed(firstProfile(m), w, pool); tps > 0 {
				sp.Estimate = fmt.Sprintf("≈ %s estimated", speedText(tps))
				sp.Glance, sp.GlanceHow = "≈ "+tpsFigure(tps), "estimated"
				sp.From = fmt.Sprintf("from %.0f GB/s of memory bandwidth over %s of weights a token", bw, words.Size(w))
			}
		}
		if j, ok := measuredOf(measured, m); ok {
			sp.Measured = speedText(j.TokensPerSecond) + " measured"
			sp.By = "by its smoke test"
			sp.JobURL = "/jobs/" + j.ID
			sp.Glance, sp.GlanceHow = tpsFigure(j.TokensPerSecond), "measured"
		}
		if sp != (views.Speed{}) {
			out[m.Name] = sp
		}
	}
	return out
}

// weightsBytes is the size of the files a model's engine loads, as the
// mirror holds them at the commit it runs; 0 when one is missing.
func weightsBytes(m catalog.Model, sizes map[[3]string]int64) int64 {
	if m.Origin == nil || len(m.Weights) == 0 {
		return 0
	}
	owner := m.Name
	if m.Canary != nil {
		owner = m.Canary.Of // its files are kept under its model's name
	}
	var total int64
	for _, p := range m.Weights {
		n, ok := sizes[[3]string{owner, hf.Short(m.Origin.Revision), p}]
		if !ok {
			return 0
		}
		total += n
	}
	return total
}

// firstProfile is the profile the fleet starts a model with first.
func firstProfile(m catalog.Model) catalog.Profile {
	best := m.Profiles[0]
	for _, p := range m.Profiles[1:] {
		if p.Priority > best.Priority {
			best = p
		}
	}
	return best
}

// speedText is tokens a second in words: "812 tokens/s", "3.4 tokens/s".
func speedText(tps float64) string { return tpsFigure(tps) + " tokens/s" }

// tpsFigure is tokens a second as a figure: a tenth below 10, whole
// above.
func tpsFigure(tps float64) string {
	if tps < 10 {
		return fmt.Sprintf("%.1f", tps)
	}
	return fmt.Sprintf("%.0f", tps)
}

// measuredBySet is what the models served from rep's files measured, by
// set name, for the serve page's row beside the estimate: the newest
// served from each set. What cannot be read costs the figures and is
// logged.
func (s *Server) measuredBySet(ctx context.Context, rep plan.Report) map[string]string {
	models, err := s.deps.Catalog.List(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.deps.Log.Error("reading the catalog for the serve page's measured speeds", "err", err)
		}
		return nil
	}
	var served []catalog.Model
	for _, m := range models {
		if m.Origin != nil && m.Origin.Repo == rep.Repo {
			served = append(served, m)
		}
	}
	if len(served) == 0 {
		return nil // no model from here: the jobs need not be read
	}
	measured := s.measured(ctx, models)
	setOf := map[string]string{}
	for _, set := range rep.Sets {
		for _, f := range set.Files {
			setOf[f.Path] = set.Name
		}
	}
	out := map[string]string{}
	newest := map[string]time.Time{}
	for _, m := range served {
		j, ok := measuredOf(measured, m)
		if !ok || len(m.Weights) == 0 {
			continue
		}
		name, ok := setOf[m.Weights[0]]
		if !ok || !j.Finished.After(newest[name]) {
			continue
		}
		newest[name] = j.Finished
		out[name] = speedText(j.TokensPerSecond) + " measured, by " + m.Name + "'s smoke test"
	}
	return out
}

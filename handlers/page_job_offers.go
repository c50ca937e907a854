package handlers

import (
	"cmp"
	"fmt"
	"modelserve/catalog"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"modelserve/internal/hf"
	"modelserve/internal/plan"
	"modelserve/internal/words"
	"modelserve/jobs"
	"modelserve/views"
)

// withOffers puts on a job refused at its plan step what would have fit,
// as the plan says it now: the same file with a shorter context, or with
// fewer slots of the context asked, or a smaller quantisation of the same
// repository at the context asked. Each is the serve form's request with
// the one change, a click to take. Retrying the refusal would only fail
// again, so the job offers these in its place.
func (s *Server) withOffers(r *http.Request, j jobs.Job, vm *views.Job) {
	if !j.Refused() || vm.FailedStep != jobs.StepPlan || s.deps.Planner == nil || s.deps.Registry == nil {
		return
	}
	req := j.Request
	if req.Format == jobs.FormatSafetensors || req.MemoryGB > 0 {
		return // original weights are refused for want of vLLM; a reserve is the operator's own figure
	}
	asked := plan.Ask{CtxPool: req.CtxPool, ContextLength: req.ContextLength, Longest: req.Longest}.Shape()
	l, err := s.lookUp(r.Context(), req.Repo, or(req.Revision, "main"))
	if err != nil {
		return // the registry or the plan is not there now: the sentence stands alone
	}
	rep, err := s.deps.Planner.RepoReport(r.Context(), l.repo, plan.Request{Size: asked})
	if err != nil {
		if r.Context().Err() == nil {
			s.deps.Log.Warn("planning a refused job's repository again for what would fit", "job", j.ID, "err", err)
		}
		return
	}
	vm.Offers = offersFor(req, rep, asked, recommendedName(l.report))
}

// recommendedName is the set rep recommends, "" when none: at the default
// pool, the file a request naming none is served from, which a context
// too long for every file leaves unmarked in the plan for it.
func recommendedName(rep plan.Report) string {
	for _, set := range rep.Sets {
		if set.Recommended {
			return set.Name
		}
	}
	return ""
}

// offersFor are what would fit of rep for a request of size that did
// not: at most one of each kind. byDefault is the set a request naming
// none is served from.
func offersFor(req jobs.Request, rep plan.Report, size catalog.Size, byDefault string) []views.Offer {
	ctx, slots := size.Context(), size.Slots
	asked := askedSet(req, rep, byDefault)
	var out []views.Offer
	if asked >= 0 {
		set := rep.Sets[asked]
		if o, ok := sameShape(req, set.Options); ok && o.LongestContext > 0 && o.LongestSlots > 0 {
			fits := o.Longest()
			// Fewer slots of the context asked, first: every request
			// keeps the length it was asked for.
			if fewer := catalog.SizeForContext(fits.Pool, ctx).Slots; slots > 1 && fits.Pool >= ctx && fewer < slots {
				out = append(out, offer(req, set.Name, o, catalog.SizeForSlots(fewer, ctx),
					fmt.Sprintf("%s with %d %s of %d tokens, in place of %d", set.Name, fewer, words.Plural(fewer, "slot", "slots"), ctx, slots),
					fmt.Sprintf("Serve with %d %s", fewer, words.Plural(fewer, "slot", "slots"))))
			}
			if o.LongestContext < ctx {
				out = append(out, offer(req, set.Name, o, fits,
					fmt.Sprintf("%s with the longest context that fits: %d tokens in %d %s", set.Name, o.LongestContext, o.LongestSlots, words.Plural(o.LongestSlots, "slot", "slots")),
					fmt.Sprintf("Serve with %d tokens", o.LongestContext)))
			}
		}
	}
	// The best quantisation that fits at the context asked: the largest
	// file whose plan places it.
	var best *plan.ReportSet
	var bestOpt plan.Option
	for i := range rep.Sets {
		set := &rep.Sets[i]
		if i == asked || set.Format != plan.FormatGGUF || !set.Planned {
			continue
		}
		if asked >= 0 && set.Bytes >= rep.Sets[asked].Bytes {
			continue
		}
		o, ok := sameShape(req, set.Options)
		if !ok || o.Fit == plan.FitsNowhere || o.Sizing.Shrunk {
			continue
		}
		if best == nil || set.Bytes > best.Bytes {
			best, bestOpt = set, o
		}
	}
	if best != nil {
		name := cmp.Or(best.Quant, best.Name)
		out = append(out, offer(req, best.Name, bestOpt, size,
			fmt.Sprintf("%s, a smaller quantisation of %s (%s), with the %d-token context asked", name, req.Repo, words.Size(best.Bytes), ctx),
			"Serve "+name))
	}
	return out
}

// askedSet is the index of the set the request named (by file or
// quantisation), or for one naming none the set recommended (byDefault
// when rep, planned for what did not fit, recommends none); -1 when
// there is none.
func askedSet(req jobs.Request, rep plan.Report, byDefault string) int {
	for i, set := range rep.Sets {
		if req.File != "" && (set.Name == req.File || slices.ContainsFunc(set.Files, func(f hf.File) bool { return f.Path == req.File })) {
			return i
		}
		if req.File == "" && req.Quant != "" && strings.EqualFold(set.Quant, req.Quant) {
			return i
		}
	}
	if req.File == "" && req.Quant == "" {
		for i, set := range rep.Sets {
			if set.Recommended {
				return i
			}
		}
		for i, set := range rep.Sets {
			if set.Name == byDefault {
				return i
			}
		}
	}
	return -1
}

// sameShape is the llama.cpp option of a set that runs where the request
// asked (the CPU, or its class of card), the first the plan lists when it
// asked nowhere.
func sameShape(req jobs.Request, opts []plan.Option) (plan.Option, bool) {
	for _, o := range opts {
		if o.Engine != plan.EngineLlamaCpp {
			continue
		}
		switch {
		case req.CPU && !o.CPU, req.GPUClass != "" && !strings.EqualFold(o.Class, req.GPUClass),
			req.GPUsPerNode > 0 && o.GPUsPerNode != req.GPUsPerNode:
			continue
		}
		return o, true
	}
	return plan.Option{}, false
}

// offer is the request as the serve form posts it, with file, place,
// size changed.
func offer(req jobs.Request, file string, o plan.Option, size catalog.Size, what, button string) views.Offer {
	keys := make([]string, 0, len(req.Env))
	for k := range req.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	env := make([]string, 0, len(keys))
	for _, k := range keys {
		env = append(env, k+"="+req.Env[k])
	}
	f := []views.Field{
		{Name: "repo", Value: req.Repo}, {Name: "revision", Value: req.Revision},
		{Name: "chosen", Value: file}, {Name: "format", Value: plan.FormatGGUF}, {Name: "projector", Value: req.Projector},
		{Name: "where", Value: where(o)}, {Name: "ctx_pool", Value: strconv.Itoa(size.Pool)}, {Name: "slots", Value: strconv.Itoa(size.Slots)},
		{Name: "replicas", Value: strconv.Itoa(req.Replicas)}, {Name: "name", Value: req.Name}, {Name: "class", Value: req.Class},
		{Name: "guard_format", Value: req.GuardFormat}, {Name: "aliases", Value: strings.Join(req.Aliases, ",")},
		{Name: "description", Value: req.Description}, {Name: "env", Value: strings.Join(env, "\n")},
	}
	if req.Tools {
		f = append(f, views.Field{Name: "tools", Value: "on"})
	}
	if req.Embeddings {
		f = append(f, views.Field{Name: "embeddings", Value: "on"})
	}
	return views.Offer{What: what, Button: button, Fields: f}
}

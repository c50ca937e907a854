package handlers

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"modelserve/catalog"
	"modelserve/internal/hf"
	"modelserve/internal/plan"
	"modelserve/jobs"
	"modelserve/views"
)

// The shape of the context pool the form fills in: slots of at least this
// many tokens, at most maxFormSlots of them (llama.cpp's own default of
// four replies at once); an embedding model many small slots.
const (
	formSlotTokens  = 4096
	maxFormSlots    = 4
	embedSlotTokens = 1024
	embedSlots      = 32
)

// servePage is the serve form, with the repository's report when the query
// names one (a link, or Look up and Choose without JavaScript).
func (s *Server) servePage(w http.ResponseWriter, r *http.Request, v visit) {
	q := r.URL.Query()
	f := formFrom(q)
	rep := s.serveReport(r.Context(), &f, q.Get("file"))
	s.render(w, r, http.StatusOK, views.ServePageView(views.ServePage{
		Layout: s.layout(v, "serve", "Serve a model"), Form: f, Report: rep, GuardFormats: catalog.GuardFormats(),
	}))
}

// serveReportFragment is the part of the form below the repository field,
// for htmx: after typing a repository, or choosing a file. A failed lookup
// is a sentence in place, answered 200 so that it is swapped in.
func (s *Server) serveReportFragment(w http.ResponseWriter, r *http.Request, v visit) {
	if !isFragment(r) {
		// Someone opened the fragment's URL: the page has the same query.
		http.Redirect(w, r, "/serve?"+r.URL.RawQuery, http.StatusSeeOther)
		return
	}
	q := r.URL.Query()
	f := formFrom(q)
	rep := s.serveReport(r.Context(), &f, q.Get("file"))
	s.render(w, r, http.StatusOK, views.ServeReport(f, rep, catalog.GuardFormats()))
}

// serveMemory redraws the memory bars for the context typed.
func (s *Server) serveMemory(w http.ResponseWriter, r *http.Request, v visit) {
	f := formFrom(r.URL.Query())
	mem := views.Memory{Note: "Choose a file to see the memory it needs."}
	if f.Repo != "" && f.Chosen != "" {
		l, err := s.lookUp(r.Context(), f.Repo, or(f.Revision, "main"))
		if err != nil {
			mem = views.Memory{Note: s.lookupSentence(r, err)}
		} else if set, ok := findSet(l.report, f.Chosen); ok {
			mem = s.memoryView(l, set, atoi(f.CtxPool))
		}
	}
	s.render(w, r, http.StatusOK, views.MemoryView(mem))
}

// serveSubmit starts a job with the form's request and shows it. A request
// the job server refuses comes back as the form, values kept, with the
// sentence saying what to change.
func (s *Server) serveSubmit(w http.ResponseWriter, r *http.Request, v visit) {
	f := formFrom(r.PostForm)
	req, err := requestFrom(f)
	if err == nil {
		req.By = v.user
		var j jobs.Job
		if j, err = s.deps.Jobs.Start(r.Context(), req); err == nil {
			s.deps.Log.Info("job started from the console", "job", j.ID, "repo", req.Repo, "user", v.user)
			http.Redirect(w, r, "/jobs/"+url.PathEscape(j.ID), http.StatusSeeOther)
			return
		}
	}
	status, ok := consoleStatus(err)
	msg := err.Error()
	if !ok {
		s.deps.Log.Error("starting a job from the console", "repo", f.Repo, "err", err)
		status, msg = http.StatusInternalServerError, genericError
	}
	rep := s.serveReport(r.Context(), &f, "")
	s.render(w, r, status, views.ServePageView(views.ServePage{
		Layout: s.layout(v, "serve", "Serve a model"), Form: f, Report: rep, Error: msg, GuardFormats: catalog.GuardFormats(),
	}))
}

// formFrom reads the form's values as typed.
func formFrom(q url.Values) views.ServeForm {
	get := func(k string) string { return strings.TrimSpace(q.Get(k)) }
	f := views.ServeForm{
		Repo: strings.Trim(get("repo"), "/"), Revision: get("revision"), Chosen: get("chosen"), Format: get("format"),
		Projector: get("projector"), Where: get("where"), CtxPool: get("ctx_pool"), Slots: get("slots"),
		Replicas: get("replicas"), Name: get("name"), Class: get("class"), GuardFormat: get("guard_format"),
		Embeddings: q.Get("embeddings") == "on", Tools: q.Get("tools") == "on",
		Aliases: get("aliases"), Description: get("description"), Env: strings.TrimSpace(q.Get("env")),
	}
	if !q.Has("replicas") {
		f.Replicas = "1"
	}
	return f
}

// requestFrom turns the form into the job's request; a value that is not
// what the field takes is refused with a sentence.
func requestFrom(f views.ServeForm) (jobs.Request, error) {
	req := jobs.Request{
		Repo: f.Repo, Revision: f.Revision, Projector: f.Projector, Name: f.Name, Description: f.Description,
		Class: f.Class, GuardFormat: f.GuardFormat, Tools: f.Tools, Embeddings: f.Embeddings,
	}
	if f.Chosen != "" {
		if f.Format == plan.FormatSafetensors {
			req.Format = jobs.FormatSafetensors
		} else {
			req.File = f.Chosen
		}
	}
	var err error
	if req.CPU, req.GPUClass, req.GPUsPerNode, req.Nodes, err = parseWhere(f.Where); err != nil {
		return req, err
	}
	number := func(field, v string, least int) (int, error) {
		if v == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < least {
			return 0, badRequest(fmt.Sprintf("%s is a whole number from %d, not %q", field, least, v))
		}
		return n, nil
	}
	pool, err := number("the context pool", f.CtxPool, 0)
	if err != nil {
		return req, err
	}
	slots, err := number("slots", f.Slots, 1)
	if err != nil {
		return req, err
	}
	if pool > 0 {
		if slots == 0 {
			slots = slotsFor(pool, f.Embeddings)
		}
		req.CtxPool, req.ContextLength = pool, max(pool/slots, 1)
	}
	if req.Replicas, err = number("replicas", f.Replicas, 0); err != nil {
		return req, err
	}
	if f.Replicas == "" {
		req.Replicas = 1
	}
	req.Aliases = strings.FieldsFunc(f.Aliases, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
	for i, line := range strings.Split(f.Env, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, val, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return req, badRequest(fmt.Sprintf("line %d of the engine environment is not NAME=VALUE: %q", i+1, line))
		}
		if req.Env == nil {
			req.Env = map[string]string{}
		}
		req.Env[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	return req, nil
}

// where is how the form names an option: "cpu", or
// "gpu:CLASS:CARDS:NODES".
func where(o plan.Option) string {
	if o.CPU {
		return "cpu"
	}
	return fmt.Sprintf("gpu:%s:%d:%d", o.Class, max(o.GPUsPerNode, 1), max(o.Nodes, 1))
}

func parseWhere(s string) (cpu bool, class string, cards, nodes int, err error) {
	switch {
	case s == "":
		return false, "", 0, 0, nil
	case s == "cpu":
		return true, "", 0, 0, nil
	}
	rest, ok := strings.CutPrefix(s, "gpu:")
	i := strings.LastIndexByte(rest, ':')
	j := strings.LastIndexByte(rest[:max(i, 0)], ':')
	if ok && j > 0 {
		class = rest[:j]
		cards, err1 := strconv.Atoi(rest[j+1 : i])
		nodes, err2 := strconv.Atoi(rest[i+1:])
		if err1 == nil && err2 == nil && cards > 0 && nodes > 0 {
			return false, class, cards, nodes, nil
		}
	}
	return false, "", 0, 0, badRequest(fmt.Sprintf("%q is not a place to run: choose one from the list", s))
}

// slotsFor is how many requests share a pool when the form does not say.
func slotsFor(pool int, embeddings bool) int {
	if embeddings {
		return max(1, min(embedSlots, pool/embedSlotTokens))
	}
	return max(1, min(maxFormSlots, pool/formSlotTokens))
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// lookupSentence is what the page says of a failed lookup: the registry's
// or the planner's sentence as it is, anything else logged.
func (s *Server) lookupSentence(r *http.Request, err error) string {
	if _, ok := consoleStatus(err); ok {
		return err.Error()
	}
	if r.Context().Err() == nil {
		s.deps.Log.Error("reading a repository for the serve page", "err", err)
	}
	return "the repository could not be read; the server's log says why"
}

// serveReport reads the form's repository and lays it out. pick is a file
// set just chosen: its best option fills the sizing fields. So does the
// first lookup of a repository, with the recommended set; after that the
// fields keep what was typed.
func (s *Server) serveReport(ctx context.Context, f *views.ServeForm, pick string) views.Report {
	if f.Repo == "" {
		return views.Report{}
	}
	if err := hf.CheckRepoID(f.Repo); err != nil {
		return views.Report{Shown: true, Error: fmt.Sprintf("%q is not a repository; it looks like owner/name, or local/FOLDER for a folder of the models directory", f.Repo)}
	}
	l, err := s.lookUp(ctx, f.Repo, or(f.Revision, "main"))
	if err != nil {
		if _, ok := consoleStatus(err); ok {
			return views.Report{Shown: true, Error: err.Error()}
		}
		if ctx.Err() == nil {
			s.deps.Log.Error("reading a repository for the serve page", "repo", f.Repo, "err", err)
		}
		return views.Report{Shown: true, Error: "the repository could not be read; the server's log says why"}
	}
	rep := l.report
	vm := views.Report{
		Shown: true, Repo: rep.Repo, Revision: rep.Revision, Commit: rep.Commit, ShortCommit: shortCommit(rep.Commit),
		GatedNote: l.gatedNote, Planned: l.planned, Reason: rep.Plan.Reason, Notes: rep.Plan.Notes,
		SuggestedName: hf.ModelName(rep.Repo),
	}
	if rep.Gated {
		vm.Gated = or(rep.GatedMode, "yes")
		if vm.Gated == "auto" || vm.Gated == "manual" {
			vm.Gated += " approval"
		}
	}
	for _, p := range rep.Projectors {
		vm.Projectors = append(vm.Projectors, views.Projector{Path: p.Path, Size: sizeText(p.Size)})
	}

	chosen, haveChosen := chooseSet(f, rep, pick, l.planned)
	for _, set := range rep.Sets {
		vm.Sets = append(vm.Sets, setView(set, set.Name == f.Chosen))
	}
	if haveChosen {
		seen := map[string]bool{}
		for _, o := range chosen.Options {
			w := where(o)
			if seen[w] {
				continue
			}
			seen[w] = true
			vm.Where = append(vm.Where, views.Choice{Value: w, Label: optionLabel(o), Selected: w == f.Where})
		}
		vm.Memory = s.memoryView(l, chosen, atoi(f.CtxPool))
	} else {
		vm.Memory = views.Memory{Note: "Choose a file to see the memory it needs."}
	}
	if pool, slots := atoi(f.CtxPool), atoi(f.Slots); pool > 0 {
		if slots <= 0 {
			slots = slotsFor(pool, f.Embeddings)
		}
		vm.PerSlot = fmt.Sprintf("%d %s of %d tokens each", slots, plural(slots, "slot", "slots"), pool/slots)
	} else {
		vm.PerSlot = "Worked out from the model and the memory where it runs"
	}
	return vm
}

// chooseSet settles which set the form's sizing is for: one just chosen
// (pick), else the one the fields were filled for, else the recommended
// one. A set newly chosen fills the sizing fields from its best option.
func chooseSet(f *views.ServeForm, rep plan.Report, pick string, planned bool) (plan.ReportSet, bool) {
	fill := false
	if _, ok := findSet(rep, pick); ok && pick != "" {
		f.Chosen, fill = pick, true
	} else if _, ok := findSet(rep, f.Chosen); !ok || f.Chosen == "" {
		f.Chosen, fill = "", true
		for _, set := range rep.Sets {
			if set.Recommended {
				f.Chosen = set.Name
			}
		}
	}
	chosen, ok := findSet(rep, f.Chosen)
	f.Format = ""
	if ok {
		f.Format = chosen.Format
	}
	if fill && ok && planned {
		fillSizing(f, chosen, rep.Plan)
	}
	return chosen, ok
}

// fillSizing fills the sizing fields for set: where its best option runs,
// and the longest context that fits there, in slots.
func fillSizing(f *views.ServeForm, set plan.ReportSet, pl plan.Plan) {
	best, ok := bestOption(set)
	if !ok {
		return
	}
	f.Where = where(best)
	pool := best.LongestContext
	if pool <= 0 {
		return
	}
	f.Embeddings = f.Embeddings || pl.Embedding
	if f.Embeddings {
		pool = min(pool, embedSlots*embedSlotTokens)
	}
	slots := slotsFor(pool, f.Embeddings)
	f.CtxPool, f.Slots = strconv.Itoa(pool), strconv.Itoa(slots)
}

// bestOption is the set's first option that fits anywhere (options come
// best first), else its first.
func bestOption(set plan.ReportSet) (plan.Option, bool) {
	for _, o := range set.Options {
		if o.Fit != plan.FitsNowhere {
			return o, true
		}
	}
	if len(set.Options) > 0 {
		return set.Options[0], true
	}
	return plan.Option{}, false
}

func findSet(rep plan.Report, name string) (plan.ReportSet, bool) {
	for _, set := range rep.Sets {
		if set.Name == name {
			return set, true
		}
	}
	return plan.ReportSet{}, false
}

// fitWord is an option's fit in words, for a badge that does not rely on
// its colour.
func fitWord(fit string) string {
	switch fit {
	case plan.FitsNow:
		return "fits now"
	case plan.FitsHardware:
		return "fits when free"
	}
	return "does not fit"
}

func setView(set plan.ReportSet, chosen bool) views.Set {
	vm := views.Set{
		Name: set.Name, Quant: or(set.Quant, "—"), Format: set.Format, Size: sizeText(set.Bytes),
		Shards: strconv.Itoa(max(set.Shards, 1)), Architecture: set.Architecture, Recommended: set.Recommended,
		Chosen: chosen, Planned: set.Planned, Note: set.Note, TokensPerSecond: "—",
	}
	if len(set.Missing) > 0 {
		vm.Shards = fmt.Sprintf("%d of %d", set.Shards-len(set.Missing), set.Shards)
	}
	seen := map[string]bool{}
	for _, o := range set.Options {
		if seen[o.Label()] {
			continue
		}
		seen[o.Label()] = true
		vm.Fits = append(vm.Fits, views.Fit{Label: o.Label(), State: views.StateOf(fitWord(o.Fit)), Why: o.Why})
	}
	if best, ok := bestOption(set); ok && best.Fit != plan.FitsNowhere && best.TokensPerSecond > 0 {
		vm.TokensPerSecond = fmt.Sprintf("≈ %.0f", best.TokensPerSecond)
		if best.TokensPerSecond < 10 {
			vm.TokensPerSecond = fmt.Sprintf("≈ %.1f", best.TokensPerSecond)
		}
	}
	return vm
}

// optionLabel is an option as the "runs on" select lists it.
func optionLabel(o plan.Option) string {
	s := o.Label() + ": " + fitWord(o.Fit)
	if o.TokensPerSecond > 0 {
		s += fmt.Sprintf(", ≈ %.0f tokens/s", o.TokensPerSecond)
	}
	return s
}

// memoryView draws the set's memory on each of its options for a context
// of tokens (the plan's own when 0): weights, KV cache and engine, each
// card's share on cards, against the room there.
func (s *Server) memoryView(l *lookup, set plan.ReportSet, tokens int) views.Memory {
	if !l.planned {
		return views.Memory{Note: "No planner is configured: the memory a file needs is worked out when a job checks it."}
	}
	if len(set.Options) == 0 {
		return views.Memory{Note: "This file was not planned: " + or(set.Note, "the plan has no option for it") + "."}
	}
	pl := l.report.Plan
	if tokens <= 0 {
		tokens = pl.Context
	}
	m := views.Memory{Context: strconv.Itoa(tokens)}
	var nodes []plan.Node
	if s.deps.Pool != nil {
		nodes = s.deps.Pool.Nodes()
	}
	seen := map[string]bool{}
	for _, o := range set.Options {
		if seen[o.Label()] {
			continue
		}
		seen[o.Label()] = true
		m.Bars = append(m.Bars, memoryBar(o.WithContext(pl.KVBytesPerToken, tokens), roomGB(o, nodes)))
	}
	if pl.KVBytesPerToken == 0 {
		m.Note = "The model's shape could not be read, so the KV cache does not follow the context."
	}
	return m
}

// roomGB is the memory an option has: the largest node's RAM on the CPU,
// one card's memory on cards; 0 when nothing says.
func roomGB(o plan.Option, nodes []plan.Node) float64 {
	var best float64
	for _, n := range nodes {
		if o.CPU {
			best = max(best, n.RAMGB)
			continue
		}
		for _, g := range n.GPUs {
			if g.Class == o.Class {
				best = max(best, g.MemoryGB)
			}
		}
	}
	if best == 0 && !o.CPU {
		if c, ok := plan.LookupClass(o.Class); ok {
			best = c.MemoryGB
		}
	}
	return best
}

func memoryBar(o plan.Option, room float64) views.Bar {
	cards := float64(max(o.GPUs(), 1))
	w, kv, eng := o.WeightsGB/cards, o.KVGB/cards, o.OverheadGB/cards
	need := w + kv + eng
	label := o.Label()
	where := "of a node's RAM"
	if o.GPUs() > 1 {
		label += ", each card"
		where = "of each card"
	} else if !o.CPU {
		where = "of the card"
	}
	scale := max(room, need, 0.001)
	b := views.Bar{
		Label: label, Capacity: room * 100 / scale, Over: room > 0 && need > room,
		Parts: []views.BarPart{
			{Name: "weights", Key: "weights", Share: w * 100 / scale, Text: gbText(w)},
			{Name: "KV cache", Key: "kv", Share: kv * 100 / scale, Text: gbText(kv)},
			{Name: "engine", Key: "engine", Share: eng * 100 / scale, Text: gbText(eng)},
		},
	}
	sum := fmt.Sprintf("weights %s + KV cache %s for %d tokens + engine %s = %s", gbText(w), gbText(kv), o.Context, gbText(eng), gbText(need))
	switch {
	case room <= 0:
		b.Text = sum + "; the room there is not known"
	case b.Over:
		b.Text = fmt.Sprintf("%s, more than the %s %s: %s too much", sum, gbText(room), where, gbText(need-room))
	default:
		b.Text = fmt.Sprintf("%s of %s %s: fits, %s left", sum, gbText(room), where, gbText(room-need))
		b.Parts = append(b.Parts, views.BarPart{Name: "free", Key: "free", Share: (room - need) * 100 / scale, Text: gbText(room - need)})
	}
	if o.Estimated {
		b.Text += " (estimated: the file's header was not read)"
	}
	return b
}

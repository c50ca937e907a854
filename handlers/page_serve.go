package handlers

import (
	"github.com/a-h/templ"

	"context"
	"fmt"
	"modelserve/internal/operr"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"modelserve/catalog"
	"modelserve/internal/hf"
	"modelserve/internal/plan"
	"modelserve/internal/words"
	"modelserve/jobs"
	"modelserve/views"
)

// servePage is the serve form, with the repository's report when the query
// names one (a link, or Look up and Choose without JavaScript).
func (s *Server) servePage(w http.ResponseWriter, r *http.Request, v visit) {
	q := r.URL.Query()
	f := formFrom(q)
	rep := s.serveReport(r.Context(), &f, q.Get("file"))
	s.render(w, r, http.StatusOK, views.ServePageView(views.ServePage{
		Layout: s.layout(v, "serve", "Serve a model"), Form: echoForm(f), Report: rep, Choices: serveChoices(),
		Search: s.searchModels(r), SearchOn: s.deps.Finder != nil,
	}))
}

// serveReportFragment is the part of the form below the repository field,
// for htmx: after typing a repository, or choosing a file. A failed lookup
// is a sentence in place, answered 200 so that it is swapped in.
func (s *Server) serveReportFragment(w http.ResponseWriter, r *http.Request, v visit) {
	if !isFragment(r) {
		// Someone opened the fragment's URL: the page has the same query.
		http.Redirect(w, r, withQuery("/serve", r.URL.RawQuery), http.StatusSeeOther)
		return
	}
	q := r.URL.Query()
	f := formFrom(q)
	rep := s.serveReport(r.Context(), &f, q.Get("file"))
	s.render(w, r, http.StatusOK, views.ServeReport(echoForm(f), rep, serveChoices(), v.csrf))
}

// serveMemory redraws what the pool and slots typed change: the bars, the
// sentence under the slots, the plan's headline, the rows' fits, the places the file may run
// and the Serve button, all from one plan for what the form now holds.
func (s *Server) serveMemory(w http.ResponseWriter, r *http.Request, v visit) {
	f := formFrom(r.URL.Query())
	if f.Repo == "" || f.Chosen == "" {
		s.render(w, r, http.StatusOK, templ.Join(views.MemoryView(views.Memory{Note: "Choose a file to see the memory it needs."}),
			views.PerSlotUpdate(perSlotText(f))))
		return
	}
	rep := s.serveReport(r.Context(), &f, "")
	if rep.Error != "" {
		s.render(w, r, http.StatusOK, templ.Join(views.MemoryView(views.Memory{Note: rep.Error}), views.PerSlotUpdate(perSlotText(f))))
		return
	}
	s.render(w, r, http.StatusOK, templ.Join(views.MemoryView(rep.Memory), views.PerSlotUpdate(rep.PerSlot),
		views.ServeReason(rep.Reason, true), views.SetRows(rep, true), views.WhereSelect(echoForm(f), rep, true), views.ServeAction(rep.Blocked, v.csrf, true)))
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
	status, ok := operatorStatus(err)
	msg, _ := operr.Sentence(err)
	if !ok {
		s.deps.Log.Error("starting a job from the console", "repo", f.Repo, "err", err)
		status, msg = http.StatusInternalServerError, genericError
	}
	rep := s.serveReport(r.Context(), &f, "")
	s.render(w, r, status, views.ServePageView(views.ServePage{
		Layout: s.layout(v, "serve", "Serve a model"), Form: echoForm(f), Report: rep, Error: msg, Choices: serveChoices(),
		SearchOn: s.deps.Finder != nil,
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

// echoForm is the form as the page shows it again: each field as typed,
// unless it is longer than any value the field takes, when it is clipped
// as words.Clip clips what a page quotes: a megabyte typed into the name
// came back as a megabyte of page. The request is made from the form as
// typed, so its refusal quotes what was sent.
func echoForm(f views.ServeForm) views.ServeForm {
	echo := func(s *string, most int) {
		if len(*s) > most {
			*s = words.Clip(*s)
		}
	}
	// A repository id, a name, a class or a number is far shorter than
	// words.ClipMost; a revision and a file's path have bounds of their
	// own (hf.CheckRevision, hf.CheckPath).
	for _, s := range []*string{&f.Repo, &f.Format, &f.Where, &f.CtxPool, &f.Slots, &f.Replicas, &f.Name, &f.Class, &f.GuardFormat} {
		echo(s, words.ClipMost)
	}
	echo(&f.Revision, 255)
	echo(&f.Chosen, hf.MaxPathLen)
	echo(&f.Projector, hf.MaxPathLen)
	echo(&f.Description, jobs.MaxDescription)
	// Aliases and engine settings are lists: a few dozen names or
	// settings, each short, fit in 4 KB.
	echo(&f.Aliases, 4<<10)
	echo(&f.Env, 4<<10)
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
			return 0, badRequest(fmt.Sprintf("%s is a whole number from %d, not %s", field, least, operr.Quote(v)))
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
		// A pool without slots is the job's to divide (plan.Ask.Shape),
		// as it divides the API's: the form says what it will be below.
		req.CtxPool = pool
		if slots > 0 {
			req.ContextLength = max(catalog.Size{Pool: pool, Slots: slots}.Context(), 1)
		}
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
			return req, badRequest(fmt.Sprintf("line %d of the engine environment is not NAME=VALUE: %s", i+1, operr.Quote(line)))
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
	return false, "", 0, 0, badRequest(fmt.Sprintf("%s is not a place to run: choose one from the list", operr.Quote(s)))
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// lookupSentence is what the page says of a failed lookup: the registry's
// or the planner's sentence as it is, anything else logged.
func (s *Server) lookupSentence(r *http.Request, err error) string {
	if msg, ok := operr.Sentence(err); ok {
		return msg
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
		return views.Report{Shown: true, Error: fmt.Sprintf("%s is not a repository; it looks like owner/name, or local/FOLDER for a folder of the models directory", operr.Quote(f.Repo))}
	}
	l, err := s.lookUp(ctx, f.Repo, or(f.Revision, "main"))
	if err != nil {
		if msg, ok := operr.Sentence(err); ok {
			return views.Report{Shown: true, Error: msg}
		}
		if ctx.Err() == nil {
			s.deps.Log.Error("reading a repository for the serve page", "repo", f.Repo, "err", err)
		}
		return views.Report{Shown: true, Error: "the repository could not be read; the server's log says why"}
	}
	rep := l.report
	vm := views.Report{
		Shown: true, Repo: rep.Repo, Revision: rep.Revision, Commit: rep.Commit, ShortCommit: hf.Short(rep.Commit),
		GatedNote: l.gatedNote, Planned: l.planned, Notes: rep.Plan.Notes,
		SuggestedName: hf.ModelName(rep.Repo),
	}
	if rep.Gated {
		vm.Gated = or(rep.GatedMode, "yes")
		if vm.Gated == "auto" || vm.Gated == "manual" {
			vm.Gated += " approval"
		}
	}
	for _, p := range rep.Projectors {
		vm.Projectors = append(vm.Projectors, views.Projector{Path: p.Path, Size: words.Size(p.Size)})
	}

	chosen, haveChosen := chooseSet(f, rep, pick, l.planned)
	vm.Picked = pick != ""
	if best, ok := bestOption(chosen); haveChosen && ok && l.planned && best.LongestContext > 0 && best.LongestSlots > 0 {
		vm.LongestPool, vm.LongestSlots = best.Longest().Pool, best.LongestSlots
	}
	// From here the plan is for the pool and slots the form holds, so the
	// rows, the select, the bars and the Serve button all say what Serve
	// would do with it, not with the default the page was filled with.
	sized, sizeErr := s.sizedReport(ctx, l, *f, chosen, haveChosen)
	if sizeErr == "" {
		chosen, _ = findSet(sized, f.Chosen)
	}
	vm.Reason = sized.Plan.Reason
	measured := s.measuredBySet(ctx, sized)
	for _, set := range sized.Sets {
		sv := setView(set, set.Name == f.Chosen)
		sv.Measured = measured[set.Name]
		vm.Sets = append(vm.Sets, sv)
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
		vm.Memory = s.memoryOf(l, sized, chosen.Name)
	} else {
		vm.Memory = views.Memory{Note: "Choose a file to see the memory it needs."}
	}
	vm.PerSlot = perSlotText(*f)
	vm.Blocked = blocked(vm, chosen, haveChosen, l.planned, f.Where)
	if sizeErr != "" {
		vm.Memory = views.Memory{Note: sizeErr}
		if vm.Blocked == "" {
			vm.Blocked = "The form cannot be sized: " + strings.TrimSuffix(sizeErr, ".") + "."
		}
	}
	return vm
}

// sizedReport is the repository planned for the pool and slots the form
// holds; the lookup's own report when they are the default it was filled
// with (which says when the default was cut to fit), or none. A sizing
// the planner refuses is its sentence.
func (s *Server) sizedReport(ctx context.Context, l *lookup, f views.ServeForm, chosen plan.ReportSet, haveChosen bool) (plan.Report, string) {
	pool, slots := atoi(f.CtxPool), atoi(f.Slots)
	if !haveChosen || !l.planned || pool <= 0 {
		return l.report, ""
	}
	if best, ok := bestOption(chosen); ok && best.Sizing.Size.Pool == pool && (slots <= 0 || best.Sizing.Size.Slots == slots) {
		return l.report, ""
	}
	req := plan.Request{Size: catalog.Size{Pool: pool, Slots: max(slots, 0)}}
	// The headers are the planner's, kept by sha256: sizing for another
	// context reads nothing from the registry.
	r, err := s.deps.Planner.RepoReport(ctx, l.repo, req)
	if err != nil {
		return l.report, s.lookupSentenceCtx(ctx, err)
	}
	return r, ""
}

// perSlotText says what each request may use of the pool the form holds,
// divided as the job divides it.
func perSlotText(f views.ServeForm) string {
	pool, slots := atoi(f.CtxPool), atoi(f.Slots)
	if pool <= 0 {
		return "Worked out from the model and the memory where it runs"
	}
	size := catalog.Size{Pool: pool, Slots: slots}
	if slots <= 0 {
		size = plan.Ask{CtxPool: pool, Embeddings: f.Embeddings}.Shape()
	}
	return fmt.Sprintf("%d %s of %d tokens each", size.Slots, words.Plural(size.Slots, "slot", "slots"), size.Context())
}

// blocked is why the form cannot serve what it shows, "" when it can: a
// gated repository the token may not download, or a file that fits no node
// of the pool where the form runs it. The job would refuse the same, after
// the operator waited.
func blocked(vm views.Report, chosen plan.ReportSet, haveChosen, planned bool, at string) string {
	switch {
	case vm.GatedNote != "":
		return "Serving needs a token with access to this repository."
	case !haveChosen && planned && vm.Reason != "":
		return "Nothing here can be served: " + vm.Reason + "."
	case !haveChosen:
		return "Choose a file to serve."
	case !chosen.Planned:
		return "This file cannot be served: " + or(chosen.Note, "it is not whole") + "."
	case !planned || chosen.Format != plan.FormatGGUF:
		return ""
	}
	o, ok := formOption(chosen, at)
	if ok && o.Fit == plan.FitsNowhere {
		return "This file fits no node of the pool: " + chosen.Name + " " + o.Why + "."
	}
	return ""
}

// formOption is the option the form runs the set on: the one its "runs
// on" names, else the planner's best.
func formOption(set plan.ReportSet, at string) (plan.Option, bool) {
	if at != "" {
		for _, o := range set.Options {
			if where(o) == at {
				return o, true
			}
		}
	}
	return bestOption(set)
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
// and the pool and slots the job gives a request that names none (the
// default, shrunk to fit: plan.Size's), so the console and the API serve
// the same model the same way. The longest context that fits is offered
// beside it (Report.LongestPool), not filled in: filled, a second model
// served from the console found no room.
func fillSizing(f *views.ServeForm, set plan.ReportSet, pl plan.Plan) {
	best, ok := bestOption(set)
	if !ok {
		return
	}
	f.Where = where(best)
	f.Embeddings = f.Embeddings || pl.Embedding
	if sz := best.Sizing.Size; sz.Pool > 0 && sz.Slots > 0 {
		f.CtxPool, f.Slots = strconv.Itoa(sz.Pool), strconv.Itoa(sz.Slots)
	}
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
// its colour; its Why says when the default context was cut to fit.
func fitWord(o plan.Option) string {
	switch o.Fit {
	case plan.FitsNow:
		return "fits now"
	case plan.FitsHardware:
		return "fits when free"
	}
	return "does not fit"
}

func setView(set plan.ReportSet, chosen bool) views.Set {
	vm := views.Set{
		Name: set.Name, Quant: or(set.Quant, "—"), Format: set.Format, Size: words.Size(set.Bytes),
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
		vm.Fits = append(vm.Fits, views.Fit{Label: o.RunsOn(), State: views.StateOf(fitWord(o)), Why: o.Why})
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
	s := o.Label() + ": " + fitWord(o)
	if o.TokensPerSecond > 0 {
		s += fmt.Sprintf(", ≈ %.0f tokens/s", o.TokensPerSecond)
	}
	return s
}

// memoryOf draws the named set's memory on each of its options, as rep
// sizes it (for the pool and slots typed, the defaults when none):
// weights, KV cache and engine, each card's share on cards, against the
// room there.
func (s *Server) memoryOf(l *lookup, rep plan.Report, name string) views.Memory {
	if !l.planned {
		return views.Memory{Note: "No planner is configured: the memory a file needs is worked out when a job checks it."}
	}
	set, ok := findSet(rep, name)
	if !ok {
		return views.Memory{Note: "Choose a file to see the memory it needs."}
	}
	if len(set.Options) == 0 {
		return views.Memory{Note: "This file was not planned: " + or(set.Note, "the plan has no option for it") + "."}
	}
	m := views.Memory{}
	seen := map[string]bool{}
	ram, card := s.headroom()
	for _, o := range set.Options {
		if seen[o.Label()] {
			continue
		}
		seen[o.Label()] = true
		if o.Engine != plan.EngineLlamaCpp {
			continue
		}
		m.Context = strconv.Itoa(o.Sizing.Size.Pool)
		kept := ram
		if !o.CPU {
			kept = card
		}
		m.Bars = append(m.Bars, memoryBar(o, kept))
	}
	if rep.Plan.KVBytesPerToken == 0 {
		m.Note = "The model's shape could not be read, so the KV cache does not follow the context."
	}
	return m
}

// lookupSentenceCtx is lookupSentence for a context without its request.
func (s *Server) lookupSentenceCtx(ctx context.Context, err error) string {
	if msg, ok := operr.Sentence(err); ok {
		return msg
	}
	if ctx.Err() == nil {
		s.deps.Log.Error("sizing a repository for the serve page", "err", err)
	}
	return "the memory could not be worked out; the server's log says why"
}

// headroom is what the fleet keeps free of a node's RAM and of each card
// for the system, never promised (the most any node keeps); none without
// a fleet.
func (s *Server) headroom() (ram, card int64) {
	if s.deps.Fleet == nil {
		return 0, 0
	}
	for _, n := range s.deps.Fleet.Nodes() {
		ram, card = max(ram, n.HeadroomBytes), max(card, n.CardHeadroomBytes)
	}
	return ram, card
}

// memoryBar is an option's sizing as a bar: weights, KV cache and engine
// (with the projector), against the room a host of that shape has, which
// is what is left once kept bytes are kept free for the system.
func memoryBar(o plan.Option, kept int64) views.Bar {
	sz := o.Sizing
	room := sz.RoomBytes
	label := o.Label()
	where := "of a node's RAM"
	if o.GPUs() > 1 {
		label += ", each card"
		where = "of each card"
	} else if !o.CPU {
		where = "of the card"
	}
	if sz.Fit == plan.FitsNow {
		where = "free " + where
	}
	need := sz.NeedBytes
	engine := sz.ComputeBytes + sz.ProjectorBytes
	scale := float64(max(room, need, 1))
	b := views.Bar{
		Label: label, Capacity: float64(room) * 100 / scale, Over: room > 0 && need > room,
		Parts: []views.BarPart{
			{Name: "weights", Key: "weights", Share: float64(sz.WeightsBytes) * 100 / scale, Text: words.Size(sz.WeightsBytes)},
			{Name: "KV cache", Key: "kv", Share: float64(sz.KVBytes) * 100 / scale, Text: words.Size(sz.KVBytes)},
			{Name: "engine", Key: "engine", Share: float64(engine) * 100 / scale, Text: words.Size(engine)},
		},
	}
	sum := fmt.Sprintf("weights %s + KV cache %s for %d tokens + engine %s = %s",
		words.Size(sz.WeightsBytes), words.Size(sz.KVBytes), sz.Size.Pool, words.Size(engine), words.Size(need))
	switch {
	case room <= 0:
		b.Text = sum + "; the room there is not known"
	case b.Over:
		b.Text = fmt.Sprintf("%s, more than the %s %s: %s too much", sum, words.Size(room), where, words.Size(need-room))
	default:
		b.Text = fmt.Sprintf("%s of %s %s: fits, %s left", sum, words.Size(room), where, words.Size(room-need))
		b.Parts = append(b.Parts, views.BarPart{Name: "free", Key: "free", Share: float64(room-need) * 100 / scale, Text: words.Size(room - need)})
	}
	if kept > 0 && room > 0 {
		b.Text += fmt.Sprintf(", %s kept free for the system", words.Size(kept))
	}
	if sz.Estimated {
		b.Text += " (estimated: the file's header was not read)"
	}
	return b
}

// serveChoices are the words the serve form offers, asked of the catalog.
func serveChoices() views.ServeChoices {
	return views.ServeChoices{GuardFormats: catalog.GuardFormats(), EngineSettings: catalog.EngineSettings()}
}

package jobs

import (
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/attribute"
	"modelserve/internal/operr"
	"path/filepath"
	"time"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/gguf"
	"modelserve/internal/hf"
	"modelserve/internal/mirror"
	"modelserve/internal/plan"
	"modelserve/internal/words"
)

// pipeline is what one run of a job has learnt so far, step by step.
type pipeline struct {
	s *Server
	l *live
	// req is the request as the job runs it: the check step fills in the
	// sizing it left out. The job keeps the request as asked, so a retry
	// works it out afresh.
	req Request
	// commit is the commit pinned by an earlier run of the job, if any.
	commit string
	// wasDone are the steps an earlier run of the job finished.
	wasDone map[string]bool

	repo hf.Repo
	// refKind is what the request's revision is (hf.RefBranch, ...), for
	// the catalog's origin.
	refKind string
	plan    plan.Plan
	planned bool
	// choice is the plan's: the weights, the vision projector if asked
	// for, and where it runs (the first layout, then the fallbacks the
	// request asked for, which the catalog keeps as lower profiles).
	choice plan.Choice
	// hardware is whether the cluster has what the layout needs, busy or
	// not: a model that waits for it is not failing.
	hardware bool
	// inPlace is a version with no room beside its model, served in place
	// of its replica (inplace.go).
	inPlace bool
	name    string
	paths   []string // on the mirror: the weights', then the projector's
	source  string
	// profiles are how it runs, as the check step sized it from the
	// header on the mirror.
	profiles []catalog.Profile
}

// run takes the job through its steps. It returns nil when the job is done,
// and a stepError saying where and why when it is not.
func (s *Server) run(ctx context.Context, l *live) error {
	j, _ := l.snapshot()
	p := &pipeline{s: s, l: l, req: j.Request, commit: j.Commit, wasDone: map[string]bool{}}
	for _, st := range j.Steps {
		if st.State == Done {
			p.wasDone[st.Name] = true
		}
	}

	// 1. The registry: what the repository holds at the revision, pinned
	// to its commit, and whether the token may download it.
	if err := p.registry(ctx); err != nil {
		return failedAt(StepRegistry, err)
	}
	if err := s.boundary(l); err != nil {
		return err
	}
	// 2. The plan: which file, and where it runs.
	if err := p.choose(ctx); err != nil {
		return failedAt(StepPlan, err)
	}
	if err := s.boundary(l); err != nil {
		return err
	}
	// 3. The mirror: fetch, resuming what is partly there, and check what
	// arrived against what the registry published.
	if err := p.fetch(ctx); err != nil {
		return failedAt(StepMirror, err)
	}
	if err := s.boundary(l); err != nil {
		return err
	}
	// 4. The check: whether the nodes' engine runs it, how much memory it
	// needs, and the context that fits.
	if err := p.check(ctx); err != nil {
		return failedAt(StepCheck, err)
	}
	if err := s.boundary(l); err != nil {
		return err
	}
	// 5. The catalog: the model's entry, with its profile and origin.
	more, err := p.addToCatalog(ctx)
	if err != nil {
		return failedAt(StepCatalog, err)
	}
	if !more {
		// The job's last steps say that nothing was started, and why, so
		// "done" is not read as "running".
		s.step(l, StepPlacement, Skipped, p.whyNoReplica())
		s.step(l, StepSmoke, Skipped, "no replica was started to ask")
		return nil
	}
	if err := s.boundary(l); err != nil {
		return err
	}
	// 6. Placement: a replica, ready.
	if s.deps.Fleet == nil {
		s.step(l, StepPlacement, Skipped, "no fleet is configured: the model is in the catalog, and nothing starts it here")
		s.step(l, StepSmoke, Skipped, "no replica was started to ask")
		return nil
	}
	if p.inPlace {
		// 6–8. In place of the model's replica, there being no room
		// beside it.
		return s.inPlace(ctx, l, p)
	}
	rep, err := s.waitReady(ctx, l, p.name, p.hardware, p.req)
	if errors.Is(err, errBusy) {
		// In the catalog, and the hardware for it exists: it starts when
		// the hardware is free, with nothing more for anyone to do.
		s.step(l, StepPlacement, Skipped, err.Error())
		return nil
	}
	if err != nil {
		return failedAt(StepPlacement, notServedAgain(p.req, err))
	}
	if err := s.boundary(l); err != nil {
		return err
	}
	// 7. The smoke test: does it answer.
	if err := s.smokeStep(ctx, l, p, p.name, rep); err != nil {
		return err
	}
	if p.req.RestoreOf != 0 {
		// 8. A restore: the version before, promoted as asked.
		return s.serveAgain(ctx, l, p)
	}
	if p.req.CanaryOf != "" {
		// 8. An update: the new version beside the old, judged.
		return s.trial(ctx, l, p)
	}
	return nil
}

// smokeStep is the smoke test: the model name, which replica rep serves,
// asked for one short reply through the gateway.
func (s *Server) smokeStep(ctx context.Context, l *live, p *pipeline, name string, rep fleet.Replica) error {
	s.step(l, StepSmoke, Running, "asking "+rep.ID+" to say hello")
	reply, tps, err := s.smoke(ctx, name, p.req.Embeddings, func(waited time.Duration) {
		s.step(l, StepSmoke, Running, fmt.Sprintf("%s is still loading the model (%s so far): asking again each second",
			rep.ID, waited.Round(time.Second)))
	})
	if err != nil {
		return failedAt(StepSmoke, err)
	}
	s.set(l, func(j *Job) { j.Reply, j.TokensPerSecond = reply, tps })
	s.step(l, StepSmoke, Done, answered(reply, tps, p.req.Embeddings, true))
	return nil
}

func (p *pipeline) registry(ctx context.Context) error {
	rev := p.req.Revision
	if p.commit != "" {
		// Carrying on: the files are the ones of the commit the job began
		// with, wherever the branch has gone since.
		rev = p.commit
	}
	p.s.step(p.l, StepRegistry, Running, fmt.Sprintf("reading %s at %s", p.req.Repo, rev))
	ctx = p.s.inStep(ctx, p.l, StepRegistry)
	repo, err := p.s.deps.Registry.Repo(ctx, p.req.Repo, rev)
	if err != nil {
		return err
	}
	// A gated repository lists its files to anyone and hands them only to
	// accounts granted access: asked now, not after the plan.
	if dc, ok := p.s.deps.Registry.(downloadChecker); ok && repo.Gated != "" {
		if err := dc.CanDownload(ctx, repo, hf.FirstWeights(repo)); err != nil {
			return err
		}
	}
	if !p.wasDone[StepCatalog] {
		if p.refKind, err = p.kindOfRevision(ctx); err != nil {
			return err
		}
	}
	p.repo = repo
	if p.commit == "" {
		p.s.set(p.l, func(j *Job) { j.Commit = repo.Commit })
	}
	p.s.step(p.l, StepRegistry, Done, fmt.Sprintf("%s at %s: %d %s", repo.ID, repo.ShortCommit(),
		len(repo.Files), words.Plural(len(repo.Files), "file", "files")))
	return nil
}

// kindOfRevision is what the request's revision is: a branch, a tag, a
// commit or another ref. Asked of the revision as requested, not the commit
// a resumed job carries on from: the catalog records the branch a model
// came from. A commit id needs no question; a branch and a tag look alike,
// and only the registry's listing of its refs tells them apart.
//
// The answer only decides whether the model is watched for new weights,
// so a registry that will not list its refs (a Hub-compatible server
// without the route) serves the model all the same: the kind is left
// empty, and the model's status says it is not watched, and why.
func (p *pipeline) kindOfRevision(ctx context.Context) (string, error) {
	if hf.IsCommit(p.req.Revision) {
		return hf.RefCommit, nil
	}
	refs, err := p.s.deps.Registry.Refs(ctx, p.req.Repo)
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		p.s.deps.Log.Warn("the registry did not list the refs; the model will not be watched for new weights",
			"job", p.l.job.ID, "repo", p.req.Repo, "revision", p.req.Revision, "err", err)
		return "", nil
	}
	return refs.KindOf(p.req.Revision), nil
}

func (p *pipeline) choose(ctx context.Context) error {
	p.s.step(p.l, StepPlan, Running, "choosing a file")
	req := p.req
	if p.s.deps.Planner != nil {
		// Unsized, the plan sizes each file as the check step will: the
		// defaults, shrunk to what fits where it runs.
		preq := plan.Request{Format: req.Format, Longest: req.Longest}
		if req.sized() || req.Format == FormatSafetensors {
			// vLLM holds each request's context (--max-model-len) for as
			// many requests as run at once (--max-num-seqs): the pool.
			preq.Size = req.Size()
		}
		pl, err := p.s.deps.Planner.Plan(ctx, p.repo, preq)
		switch {
		case err == nil:
			p.plan, p.planned = pl, true
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			// The plan is advice: without it, the defaults still serve.
			p.s.deps.Log.Warn("planning a model", "repo", p.repo.ID, "err", err)
		}
	}
	choice, err := plan.Choose(p.repo, p.plan, p.planned, plan.Want{File: req.File, Quant: req.Quant, Projector: req.Projector,
		Layout: plan.LayoutRequest{CPU: req.CPU, GPUClass: req.GPUClass, GPUsPerNode: req.GPUsPerNode, Nodes: req.Nodes,
			Format: req.Format, Fallbacks: req.Fallbacks}})
	if err != nil {
		return err
	}
	p.choice = choice
	p.hardware = plan.HardwareExists(choice.Layouts)
	if !p.planned && p.choice.First().CPU {
		p.hardware = true // this node's CPU
	}
	if req.Format == FormatSafetensors && p.s.deps.VLLM == "" {
		// Planned, so the operator sees where it would run; refused, as
		// nothing here would start it.
		return sentencef("original weights run on vLLM, which this fleet does not start: choose a GGUF file of %s instead", p.repo.ID)
	}
	if p.planned && p.choice.First().Fit == plan.FitsNowhere {
		// Before a byte of the weights is fetched: no node of the pool
		// could ever host it as asked.
		return sentencef("%s %s", p.choice.Set.Name, or(p.choice.First().Sizing.Reason, p.choice.First().Why))
	}
	inPlace := ""
	if req.CanaryOf != "" && p.planned && !p.wasDone[StepCatalog] {
		// A canary runs beside its model, or in place of its replica, or
		// its trial never begins: said before a byte is fetched, rather
		// than after a wait for room. Carrying on after a restart, its
		// entry says which (addToCatalog): the room its own replica holds
		// is not room beside.
		if why, ok := p.roomBeside(); !ok {
			if !req.InPlace {
				return noRoomBeside(req, ": "+why)
			}
			p.inPlace = true
			inPlace = fmt.Sprintf("; there is no room beside %s (%s), so it is served in place of %s's replica: %s",
				req.CanaryOf, why, req.CanaryOf, p.s.ReloadCost(ctx, req.CanaryOf))
		}
	}
	p.name = or(req.Name, hf.ModelName(p.repo.ID))
	p.s.set(p.l, func(j *Job) { j.Model = p.name })

	what := or(p.choice.Set.Quant, p.choice.Set.Name)
	if req.Format == FormatSafetensors {
		what = "original weights"
	}
	total, n := p.choice.Set.Bytes, len(p.choice.Set.Files)
	if p.choice.Projector != nil {
		total, n = total+p.choice.Projector.Size, n+1
	}
	needs := ""
	if sz := p.choice.First().Sizing; p.planned && sz.NeedBytes > 0 {
		needs = fmt.Sprintf("; needs %s %s", words.Size(sz.NeedBytes), where(p.choice.First()))
	}
	runs := label(p.choice.First())
	for _, o := range p.choice.Layouts[1:] {
		runs += ", else " + label(o)
	}
	p.s.step(p.l, StepPlan, Done, fmt.Sprintf("%s, %s in %d %s, revision %s; runs on %s%s%s",
		what, words.Size(total), n, words.Plural(n, "file", "files"), p.repo.ShortCommit(), runs, needs, inPlace))
	return nil
}

// roomBeside says whether the chosen layout has room now, beside what the
// fleet has promised, and if not, why: the plan's own word, or for a
// replica that reserves the memory its request named, the most any node
// has free. Room the fleet would give back for it by the classes' rule
// (an opportunistic model's, for a critical one: fleet.Victims) counts as
// room, as it does for a serve.
func (p *pipeline) roomBeside() (string, bool) {
	first := p.choice.First()
	if p.req.MemoryGB > 0 && first.CPU {
		need, most := p.req.memoryBytes(), int64(0)
		for _, n := range p.s.pool() {
			if p.roomMadeOn(n, need) {
				return "", true
			}
			most = max(most, n.FreeRAMBytes)
		}
		if need > most {
			return fmt.Sprintf("it reserves %s, and the most a node has free is %s", words.Size(need), words.Size(most)), false
		}
		return "", true
	}
	if first.Fit == plan.FitsHardware {
		if first.CPU {
			for _, n := range p.s.pool() {
				if p.roomMadeOn(n, first.Sizing.NeedBytes) {
					return "", true
				}
			}
		}
		return or(first.Why, "the hardware it fits is in use"), false
	}
	return "", true
}

// roomMadeOn is whether node n has need bytes of RAM for the canary, free
// now or held by replicas the fleet gives back for it by the classes'
// rule. Each replica holds what it was placed by (its EstimateBytes).
func (p *pipeline) roomMadeOn(n plan.Node, need int64) bool {
	if n.FreeRAMBytes >= need {
		return true
	}
	if p.s.deps.Fleet == nil || need <= 0 {
		return false
	}
	health := map[string]fleet.ModelHealth{}
	for _, h := range p.s.deps.Fleet.ModelHealth() {
		health[h.Model] = h
	}
	var hs []fleet.Holder
	for _, r := range p.s.deps.Fleet.Replicas() {
		if r.Node != n.Name || r.State == fleet.Stopped {
			continue
		}
		h := health[r.Model]
		hs = append(hs, fleet.Holder{ID: r.ID, Model: r.Model, Class: h.Class, Min: h.Want,
			Busy: r.State != fleet.Ready, Ready: r.State == fleet.Ready, Held: r.EstimateBytes})
	}
	asker := catalog.Model{Name: catalog.CanaryName(p.req.CanaryOf, p.repo.Commit), Class: p.req.Class}
	_, _, ok := fleet.Victims(hs, asker, n.FreeRAMBytes, need)
	return ok
}

func (p *pipeline) fetch(ctx context.Context) error {
	p.s.step(p.l, StepMirror, Running, "asking the mirror for "+p.choice.Set.Name)
	ctx = p.s.inStep(ctx, p.l, StepMirror)
	if len(p.choice.Set.Files) > 0 {
		p.s.annotate(p.l, StepMirror, attribute.String("modelserve.file", p.choice.Set.Files[0].Path))
	}
	all := p.choice.Set.Files
	if p.choice.Projector != nil {
		all = append(all[:len(all):len(all)], *p.choice.Projector)
	}
	files := make([]mirror.File, 0, len(all))
	unchecked := 0
	for _, f := range all {
		files = append(files, mirror.File{
			Model: or(p.req.CanaryOf, p.name), Revision: p.repo.ShortCommit(), Path: f.Path,
			URL:  p.s.deps.Registry.DownloadURL(p.repo.ID, p.repo.Commit, f.Path),
			Size: f.Size,
			// The mirror refuses a copy that is not what the registry
			// published, rather than hand it to every node.
			SHA256: f.SHA256,
		})
		if f.SHA256 == "" {
			unchecked++
		}
	}
	paths, err := p.fetchBounded(ctx, files)
	if err != nil {
		return err
	}
	if len(paths) != len(files) {
		return fmt.Errorf("the mirror returned %d paths for %d files", len(paths), len(files))
	}
	p.paths = paths
	// A node loads a single file by its path, and a split or safetensors
	// model from its directory.
	p.source = paths[0]
	if len(p.choice.Set.Files) > 1 {
		p.source = filepath.Dir(paths[0])
	}
	var total int64
	for _, f := range all {
		total += f.Size
	}
	sums := "checksums match the registry"
	if unchecked > 0 {
		sums = fmt.Sprintf("checksums match the registry (%d small %s it publishes none for: sizes match)",
			unchecked, words.Plural(unchecked, "file", "files"))
	}
	p.s.step(p.l, StepMirror, Done, fmt.Sprintf("%s on the mirror, %s", words.Size(total), sums))
	return nil
}

func (p *pipeline) check(ctx context.Context) error {
	if p.req.Format == FormatSafetensors {
		return p.checkOriginal()
	}
	p.s.step(p.l, StepCheck, Running, "reading its header from the mirror")
	// The first shard carries the architecture; a projector is another
	// model altogether.
	h, err := gguf.Read(ctx, p.paths[0])
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// No engine can run it, and a file with no GGUF header could be
		// anything at all (a shared library, a script): it does not stay
		// where a node, or anything that names a path, could reach it.
		p.discard(ctx)
		if msg, ok := operr.Sentence(err); ok {
			// The file's own fault, said of the file.
			return operr.Wrap(operr.Refused, err, "%s on the mirror cannot be served: %s", filepath.Base(p.paths[0]), msg)
		}
		p.s.deps.Log.Warn("reading a GGUF header", "job", p.l.job.ID, "path", p.paths[0], "err", err)
		return sentencef("%s on the mirror has no GGUF header that can be read, though it is the file the registry published: "+
			"the repository's file is damaged or not a GGUF model; pick another file", filepath.Base(p.paths[0]))
	}
	known := p.s.deps.Architectures
	if known == nil {
		known = gguf.KnownArchitectures()
	}
	if err := known.Supported(h.Architecture, p.s.deps.EngineBuild); err != nil {
		return err
	}
	// Asked for the CPU, and slow there: said, not refused (the request
	// named it), so the job says why its replies take minutes.
	if msg, slow := plan.SlowCPU(p.choice.First()); slow {
		p.s.step(p.l, StepCheck, Running, msg)
	}
	var mmproj int64
	if p.choice.Projector != nil {
		mmproj = p.choice.Projector.Size
	}
	// The sizing the plan step showed, now from the header on the mirror:
	// what the engine is started with and the replica is placed by.
	req := &p.req
	x := plan.Extra{Env: req.Env, MemoryBytes: req.memoryBytes(), Cores: p.cores}
	sz, profiles, err := p.choice.Serve(plan.Model{Header: h, WeightsBytes: p.choice.Set.Bytes, ProjectorBytes: mmproj}, req.ask(), p.s.pool(), x)
	if err != nil {
		return err
	}
	req.CtxPool, req.ContextLength, req.Embeddings = sz.Size.Pool, sz.Size.Context(), profiles[0].Embeddings
	p.profiles = profiles
	basis := fmt.Sprintf("weights %s + KV cache %s for %d tokens + engine %s", words.Size(sz.WeightsBytes), words.Size(sz.KVBytes), sz.Size.Pool, words.Size(sz.ComputeBytes))
	if c := profiles[0].PromptCacheBytes; c > 0 && profiles[0].Cards() == 0 {
		basis += fmt.Sprintf(" (of which its prompt cache %s)", words.Size(c))
	}
	if sz.ProjectorBytes > 0 {
		basis += " + projector " + words.Size(sz.ProjectorBytes)
	}
	if sz.Estimated {
		basis = "weights plus half again plus two; the header gave no shape"
	}
	if req.MemoryGB > 0 {
		basis = "as asked, in place of " + basis
	}
	slots := sz.Size.Words()
	if sz.Shrunk {
		slots += ", cut to fit"
	}
	needs := words.Size(profiles[0].RAMBytes) + " " + where(p.choice.First())
	if profiles[0].Cards() > 0 {
		// And the RAM beside the cards, which the replica is placed by too.
		needs = fmt.Sprintf("%s %s and %s of the node's RAM", words.Size(profiles[0].CardBytes), where(p.choice.First()),
			words.Size(profiles[0].HostBytes()))
	}
	p.s.step(p.l, StepCheck, Done, fmt.Sprintf("%s, needs %s (%s); %s",
		or(h.Architecture, "architecture not read"), needs, basis, slots))
	return nil
}

// discard takes the set's files off the mirror, for a set that can never
// be served; what cannot be removed is logged, and the job's sentence
// stands either way.
func (p *pipeline) discard(ctx context.Context) {
	for _, f := range p.choice.Set.Files {
		err := p.s.deps.Mirror.Remove(ctx, or(p.req.CanaryOf, p.name), p.repo.ShortCommit(), f.Path, nil)
		if err != nil && !errors.Is(err, mirror.ErrNotFound) {
			p.s.deps.Log.Warn("removing a file that failed its check from the mirror", "job", p.l.job.ID, "file", f.Path, "err", err)
		}
	}
}

// pool is the nodes a model is sized against; none when nothing says.
func (s *Server) pool() []plan.Node {
	if s.deps.Pool == nil {
		return nil
	}
	return s.deps.Pool()
}

// addToCatalog writes the model's entry. It returns whether the job goes on
// to start it: not for a model loaded on demand, nor for one that someone
// else added meanwhile.
func (p *pipeline) addToCatalog(ctx context.Context) (bool, error) {
	req := p.req
	if p.wasDone[StepCatalog] {
		// Added before the restart; adding it again would replace what
		// an operator may have changed since. Its entry says whether a
		// version is served in place.
		if req.CanaryOf != "" {
			m, err := p.s.deps.Catalog.Get(ctx, p.name)
			if err != nil {
				return false, err
			}
			// One of several replicas gave its room to the version, whose
			// entry then has a replica of its own: the job kept the
			// model's scaling before (takeBack).
			p.inPlace = m.InPlace() || p.l.takeBack().Scaling != nil
		}
		return req.Replicas > 0, nil
	}
	p.s.step(p.l, StepCatalog, Running, "adding "+p.name)
	m := catalogEntry(req, p.name)
	m.Source = p.source
	for _, f := range p.choice.Set.Files {
		m.Weights = append(m.Weights, f.Path)
	}
	if p.choice.Projector != nil {
		m.Projector = p.choice.Projector.Path
	}
	m.ContextLength, m.MaxOutput = req.Size().Context(), catalog.MaxOutput(req.Size().Context())
	m.Capabilities.Embeddings = req.Embeddings
	m.Profiles = p.profiles
	files := p.choice.Set.Files
	if p.choice.Projector != nil {
		files = append(files[:len(files):len(files)], *p.choice.Projector)
	}
	origin := &catalog.Origin{Repo: p.repo.ID, Revision: p.repo.Commit, Ref: req.Revision, RefKind: p.refKind}
	if req.CanaryOf != "" {
		// A version of the model, from the branch the model is watched on.
		parent, err := p.s.deps.Catalog.Get(ctx, req.CanaryOf)
		if err != nil {
			return false, err
		}
		if parent.Origin != nil {
			origin.Ref, origin.RefKind = parent.Origin.Ref, parent.Origin.RefKind
		}
		m.Canary = &catalog.Canary{Of: req.CanaryOf}
		m.Scaling = catalog.Scaling{Min: req.Replicas, Max: req.Replicas}
		if p.inPlace {
			// No replica of its own: the model's entry takes its version
			// (catalog.Model.InPlace).
			m.Scaling = catalog.Scaling{Min: 0, Max: 1}
		}
	}
	for _, f := range files {
		origin.Files = append(origin.Files, catalog.OriginFile{Path: f.Path, Bytes: f.Size, SHA256: f.SHA256})
	}
	m.Origin = origin

	// Whether the name is new to the catalog, recorded before the entry
	// is written: a job that then ends without serving it takes out what
	// it added (undo), and never an entry that was there before it.
	j, _ := p.l.snapshot()
	ours, marked := j.Added, false
	if !ours {
		_, err := p.s.deps.Catalog.Get(ctx, p.name)
		switch {
		case isNotFound(err):
			p.s.mark(p.l, func(j *Job) { j.Added = true })
			marked = true
		case err != nil:
			return false, err
		}
	}
	add := p.s.deps.Catalog.Add
	if req.IfAbsent && !ours {
		// An entry this job wrote before a restart is its own to write
		// again; any other is left as it is.
		add = p.s.deps.Catalog.AddNew
	}
	if err := add(ctx, m, req.By); err != nil {
		if marked {
			// Nothing written: an entry there now is someone else's.
			p.s.mark(p.l, func(j *Job) { j.Added = false })
		}
		if req.CanaryOf != "" && errors.Is(err, catalog.ErrExists) {
			return false, sentencef("%s is on trial already: promote or roll it back before serving it again", p.name)
		}
		if req.IfAbsent && errors.Is(err, catalog.ErrExists) {
			p.s.step(p.l, StepCatalog, Skipped, p.name+" was added meanwhile; left as it is")
			return false, nil
		}
		return false, err
	}
	if req.Replicas == 0 {
		p.s.step(p.l, StepCatalog, Done, p.name+" added on demand: it loads when first asked for")
		return false, nil
	}
	p.s.step(p.l, StepCatalog, Done, fmt.Sprintf("%s added, %d %s", p.name, req.Replicas, words.Plural(req.Replicas, "replica", "replicas")))
	return true, nil
}

// whyNoReplica is the placement step's sentence for a job that starts no
// replica: the request asked for none, or the entry was someone else's.
func (p *pipeline) whyNoReplica() string {
	if j, _ := p.l.snapshot(); p.req.IfAbsent {
		if st, ok := j.Step(StepCatalog); ok && st.State == Skipped {
			return "no replica started: " + p.name + " was already in the catalog, and runs as its entry says"
		}
	}
	return "no replica started: " + p.name + " is on demand (replicas 0) and loads when first asked for; " +
		"ask for replicas 1 or more to have one running now"
}

// cores is what a CPU replica computes on: as asked, else half the smallest
// node it fits on when the fleet can say, else the engine's default.
func (p *pipeline) cores(need int64) int {
	if p.req.CPUCores > 0 {
		return p.req.CPUCores
	}
	if nc, ok := p.s.deps.Fleet.(interface{ NodeCPUs(need int64) []int }); ok {
		return catalog.SuggestCores(nc.NodeCPUs(need))
	}
	return 0
}

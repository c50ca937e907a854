package jobs

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"modelserve/catalog"
	"modelserve/internal/gguf"
	"modelserve/internal/hf"
	"modelserve/internal/mirror"
	"modelserve/internal/plan"
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

	repo    hf.Repo
	set     hf.FileSet // the weights
	proj    *hf.File   // the vision projector, if asked for
	plan    plan.Plan
	planned bool
	layout  plan.Option
	// hardware is whether the cluster has what the layout needs, busy or
	// not: a model that waits for it is not failing.
	hardware bool
	name     string
	paths    []string // on the mirror: the weights', then the projector's
	source   string
	memGB    int
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
	// 2. The plan: which file, and where it runs.
	if err := p.choose(ctx); err != nil {
		return failedAt(StepPlan, err)
	}
	// 3. The mirror: fetch, resuming what is partly there, and check what
	// arrived against what the registry published.
	if err := p.fetch(ctx); err != nil {
		return failedAt(StepMirror, err)
	}
	// 4. The check: whether the nodes' engine runs it, how much memory it
	// needs, and the context that fits.
	if err := p.check(ctx); err != nil {
		return failedAt(StepCheck, err)
	}
	// 5. The catalog: the model's entry, with its profile and origin.
	more, err := p.addToCatalog(ctx)
	if err != nil || !more {
		return failedAt(StepCatalog, err)
	}
	// 6. Placement: a replica, ready.
	if s.deps.Fleet == nil {
		s.step(l, StepPlacement, Skipped, "no fleet is configured: the model is in the catalog, and nothing starts it here")
		s.step(l, StepSmoke, Skipped, "no replica was started to ask")
		return nil
	}
	rep, err := s.waitReady(ctx, l, p.name, p.hardware)
	if errors.Is(err, errBusy) {
		// In the catalog, and the hardware for it exists: it starts when
		// the hardware is free, with nothing more for anyone to do.
		s.step(l, StepPlacement, Skipped, err.Error())
		return nil
	}
	if err != nil {
		return failedAt(StepPlacement, err)
	}
	// 7. The smoke test: does it answer.
	s.step(l, StepSmoke, Running, "asking "+rep.ID+" to say hello")
	reply, tps, err := s.smoke(ctx, rep, p.name, p.req.Embeddings)
	if err != nil {
		return failedAt(StepSmoke, err)
	}
	s.set(l, func(j *Job) { j.Reply, j.TokensPerSecond = reply, tps })
	if p.req.Embeddings {
		s.step(l, StepSmoke, Done, "answered with "+reply)
	} else {
		s.step(l, StepSmoke, Done, fmt.Sprintf("answered at %.1f tokens/s: %q", tps, reply))
	}
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
	repo, err := p.s.deps.Registry.Repo(ctx, p.req.Repo, rev)
	if err != nil {
		return said(err)
	}
	// A gated repository lists its files to anyone and hands them only to
	// accounts granted access: asked now, not after the plan.
	if dc, ok := p.s.deps.Registry.(downloadChecker); ok && repo.Gated != "" {
		if err := dc.CanDownload(ctx, repo, firstWeights(repo)); err != nil {
			return said(err)
		}
	}
	p.repo = repo
	if p.commit == "" {
		p.s.set(p.l, func(j *Job) { j.Commit = repo.Commit })
	}
	p.s.step(p.l, StepRegistry, Done, fmt.Sprintf("%s at %s: %d %s", repo.ID, repo.ShortCommit(),
		len(repo.Files), plural(len(repo.Files), "file", "files")))
	return nil
}

func (p *pipeline) choose(ctx context.Context) error {
	p.s.step(p.l, StepPlan, Running, "choosing a file")
	req := p.req
	if p.s.deps.Planner != nil {
		tokens := req.pool()
		if req.Format == FormatSafetensors {
			tokens = req.context()
		}
		pl, err := p.s.deps.Planner.Plan(ctx, p.repo, plan.Request{Context: tokens, Format: req.Format})
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
	if req.Format == FormatGGUF && req.Quant == "" && req.File == "" {
		if rec, ok := p.plan.Recommended(); p.planned && ok {
			req.File = rec.Artifact
		} else {
			req.Quant = defaultQuant
		}
	}
	var err error
	if req.Format == FormatSafetensors {
		p.set, err = pickSafetensors(p.repo, req)
	} else {
		p.set, err = pick(p.repo, req)
	}
	if err != nil {
		return err
	}
	if req.Projector != "" {
		f, err := projector(p.repo, req.Projector)
		if err != nil {
			return err
		}
		p.proj = &f
	}
	layout, err := plan.ChooseLayout(plan.LayoutRequest{CPU: req.CPU, GPUClass: req.GPUClass,
		GPUsPerNode: req.GPUsPerNode, Nodes: req.Nodes, Format: req.Format}, p.plan, p.planned, p.set)
	if err != nil {
		return said(err)
	}
	p.layout, p.hardware = layout[0], plan.HardwareExists(layout)
	if !p.planned && p.layout.CPU {
		p.hardware = true // this node's CPU
	}
	p.name = or(req.Name, hf.ModelName(p.repo.ID))
	p.s.set(p.l, func(j *Job) { j.Model = p.name })

	what := or(p.set.Quant, p.set.Name)
	if req.Format == FormatSafetensors {
		what = "original weights"
	}
	total, n := p.set.Bytes, len(p.set.Files)
	if p.proj != nil {
		total, n = total+p.proj.Size, n+1
	}
	p.s.step(p.l, StepPlan, Done, fmt.Sprintf("%s, %s in %d %s, revision %s; runs on %s",
		what, size(total), n, plural(n, "file", "files"), p.repo.ShortCommit(), label(p.layout)))
	return nil
}

func (p *pipeline) fetch(ctx context.Context) error {
	p.s.step(p.l, StepMirror, Running, "asking the mirror for "+p.set.Name)
	all := p.set.Files
	if p.proj != nil {
		all = append(all[:len(all):len(all)], *p.proj)
	}
	files := make([]mirror.File, 0, len(all))
	unchecked := 0
	for _, f := range all {
		files = append(files, mirror.File{
			Model: p.name, Revision: p.repo.ShortCommit(), Path: f.Path,
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
	paths, err := p.s.deps.Mirror.Fetch(ctx, files, func(pr mirror.Progress) {
		p.s.progress(p.l, pr.BytesDone, pr.BytesTotal)
	})
	if err != nil {
		return said(err)
	}
	if len(paths) != len(files) {
		return fmt.Errorf("the mirror returned %d paths for %d files", len(paths), len(files))
	}
	p.paths = paths
	// A node loads a single file by its path, and a split or safetensors
	// model from its directory.
	p.source = paths[0]
	if len(p.set.Files) > 1 {
		p.source = filepath.Dir(paths[0])
	}
	var total int64
	for _, f := range all {
		total += f.Size
	}
	sums := "checksums match the registry"
	if unchecked > 0 {
		sums = fmt.Sprintf("checksums match the registry (%d small %s it publishes none for: sizes match)",
			unchecked, plural(unchecked, "file", "files"))
	}
	p.s.step(p.l, StepMirror, Done, fmt.Sprintf("%s on the mirror, %s", size(total), sums))
	return nil
}

func (p *pipeline) check(ctx context.Context) error {
	if p.req.Format == FormatSafetensors {
		// vLLM reads the model's shape from its config.json, which came
		// with the weights.
		p.s.step(p.l, StepCheck, Done, fmt.Sprintf("%s of weights for vLLM", size(p.set.Bytes)))
		return nil
	}
	p.s.step(p.l, StepCheck, Running, "reading its header from the mirror")
	// The first shard carries the architecture; a projector is another
	// model altogether.
	h, err := gguf.Read(ctx, p.paths[0])
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
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
		return said(err)
	}
	// Asked for the CPU, and slow there: said, not refused (the request
	// named it), so the job says why its replies take minutes.
	if msg, slow := plan.SlowCPU(p.layout); slow {
		p.s.step(p.l, StepCheck, Running, msg)
	}
	var mmproj int64
	if p.proj != nil {
		mmproj = p.proj.Size
	}
	sized, err := p.size(h, mmproj)
	if err != nil {
		return err
	}
	req := p.req
	parallel := max(1, req.CtxPool/req.ContextLength)
	kv := int64(req.CtxPool) * h.KVBytesPerToken()
	memGB := int((h.MemoryBytes(p.set.Bytes, req.CtxPool, parallel, mmproj) + 1<<30 - 1) >> 30)
	unit, div := unitOf(max(p.set.Bytes, kv))
	basis := fmt.Sprintf("weights %.1f %s + KV cache %.1f %s for %d tokens + engine",
		float64(p.set.Bytes)/div, unit, float64(kv)/div, unit, req.CtxPool)
	if !h.Shaped() {
		// MemoryBytes falls back to the rough figure from before shapes
		// were read.
		basis = "weights plus half again plus two; the header gave no shape"
	}
	if req.MemoryGB > 0 {
		memGB, basis = req.MemoryGB, "as asked, in place of "+basis
	}
	p.memGB = memGB
	slots := fmt.Sprintf("%d %s of %d tokens", parallel, plural(parallel, "slot", "slots"), req.ContextLength)
	if sized != "" {
		slots += " (" + sized + ")"
	}
	p.s.step(p.l, StepCheck, Done, fmt.Sprintf("%s, needs about %d GB (%s); %s",
		or(h.Architecture, "architecture not read"), memGB, basis, slots))
	return nil
}

// size works out the pool and the slots: as asked; for an embedding model
// many small slots; otherwise what the model was trained for, cut to what
// fits beside its weights where it runs. It says how it chose, when it
// chose.
func (p *pipeline) size(h gguf.Header, mmproj int64) (string, error) {
	req := &p.req
	if h.Embedding {
		req.Embeddings = true
	}
	why := ""
	switch {
	case req.sized():
		req.CtxPool, req.ContextLength = req.pool(), req.context()
	case req.Embeddings:
		req.ContextLength, req.CtxPool = embedSlotTokens, embedSlotTokens*embedSlots
		why = "an embedding model: many passages at once"
	default:
		var err error
		if why, err = p.fitContext(h, mmproj); err != nil {
			return "", err
		}
	}
	if !p.layout.CPU {
		// On cards, the weights and the pool's cache have to fit them: a
		// 70B with a 65536-token pool on a 24 GB card loaded its weights
		// and then failed to make its context, every time.
		var cardGB float64
		if c, ok := plan.LookupClass(p.layout.Class); ok {
			cardGB = c.MemoryGB
		}
		fitted, shrunk, err := gguf.FitPoolToCard(h, gguf.Pool{CtxPool: req.CtxPool, ContextLength: req.ContextLength},
			p.set.Bytes+mmproj, p.layout.Class, cardGB, max(p.layout.GPUsPerNode, 1))
		if err != nil {
			return "", said(err)
		}
		if shrunk != "" {
			req.CtxPool, req.ContextLength, why = fitted.CtxPool, fitted.ContextLength, shrunk
		}
	}
	return why, nil
}

// fitContext sizes the pool of a request that named none: the context the
// model was trained for, cut to the longest whose cache fits beside the
// weights where it runs, in as many slots of it as fit, up to four.
func (p *pipeline) fitContext(h gguf.Header, mmproj int64) (string, error) {
	req := &p.req
	trained := h.ContextLength
	if trained <= 0 || !h.Shaped() {
		req.CtxPool, req.ContextLength = catalog.DefaultCtxPool, catalog.DefaultContextLength
		return "its header gives no trained context: the defaults", nil
	}
	room := p.room()
	if room <= 0 {
		// Nothing says how much memory there is: the trained context up
		// to the default, in four slots.
		ctx := min(trained, catalog.DefaultContextLength)
		req.ContextLength, req.CtxPool = ctx, ctx*maxSlots
		return "", nil
	}
	weights := p.set.Bytes + mmproj
	ctx := h.LongestContextThatFits(room, weights)
	if ctx <= 0 {
		if trained < 1024 {
			// Too short a context for the search, which counts in
			// thousands: the model's own, once.
			req.ContextLength, req.CtxPool = trained, trained
			return "", nil
		}
		return "", sentencef("its weights (%s) leave no room for a context of even 1024 tokens in %s %s: pick a smaller file, or run it where there is more memory",
			size(weights), size(room), where(p.layout))
	}
	slots := 1
	for n := maxSlots; n > 1; n-- {
		if h.MemoryBytes(p.set.Bytes, ctx*n, n, mmproj) <= room {
			slots = n
			break
		}
	}
	req.ContextLength, req.CtxPool = ctx, ctx*slots
	if ctx < trained {
		return fmt.Sprintf("trained for %d tokens, cut to what fits in %s", trained, size(room)), nil
	}
	return "", nil
}

// room is the memory the model has where it runs: a node's RAM on the CPU,
// the cards' on a GPU; 0 when nothing says.
func (p *pipeline) room() int64 {
	if p.layout.CPU {
		if p.s.deps.NodeMemory != nil {
			return p.s.deps.NodeMemory()
		}
		return 0
	}
	if c, ok := plan.LookupClass(p.layout.Class); ok {
		return int64(c.MemoryGB*(1<<30)) * int64(max(p.layout.GPUsPerNode, 1))
	}
	return 0
}

// addToCatalog writes the model's entry. It returns whether the job goes on
// to start it: not for a model loaded on demand, nor for one that someone
// else added meanwhile.
func (p *pipeline) addToCatalog(ctx context.Context) (bool, error) {
	req := p.req
	if p.wasDone[StepCatalog] {
		// Added before the restart; adding it again would replace what
		// an operator may have changed since.
		return req.Replicas > 0, nil
	}
	p.s.step(p.l, StepCatalog, Running, "adding "+p.name)
	m := catalogEntry(req, p.name)
	m.Source = p.source
	m.ContextLength, m.MaxOutput = req.context(), catalog.MaxOutput(req.context())
	m.Capabilities.Embeddings = req.Embeddings
	m.Profiles = []catalog.Profile{p.profile()}
	files := p.set.Files
	if p.proj != nil {
		files = append(files[:len(files):len(files)], *p.proj)
	}
	origin := &catalog.Origin{Repo: p.repo.ID, Revision: p.repo.Commit}
	for _, f := range files {
		origin.Files = append(origin.Files, catalog.OriginFile{Path: f.Path, Bytes: f.Size, SHA256: f.SHA256})
	}
	m.Origin = origin

	add := p.s.deps.Catalog.Add
	if req.IfAbsent {
		add = p.s.deps.Catalog.AddNew
	}
	if err := add(ctx, m, req.By); err != nil {
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
	p.s.step(p.l, StepCatalog, Done, fmt.Sprintf("%s added, %d %s", p.name, req.Replicas, plural(req.Replicas, "replica", "replicas")))
	return true, nil
}

// profile is how the model runs, for its catalog entry.
func (p *pipeline) profile() catalog.Profile {
	req, lay := p.req, p.layout
	prof := catalog.Profile{Engine: EngineLlamaCpp, Env: req.Env, Priority: 100, Weight: 1}
	sizing := catalog.Sizing{CtxPool: req.CtxPool, ContextLength: req.ContextLength,
		Embeddings: req.Embeddings, Judge: req.GuardFormat != ""}
	cards := max(lay.GPUsPerNode, 1)
	switch {
	case req.Format == FormatSafetensors:
		prof.Engine = EngineVLLM
		prof.Name = fmt.Sprintf("gpu-%dx%s", cards*max(lay.Nodes, 1), strings.ToLower(lay.Class))
		prof.GPUClass, prof.GPUsPerNode, prof.TP = lay.Class, cards, cards
		if lay.Nodes > 1 {
			prof.PP, prof.Nodes = lay.Nodes, lay.Nodes
		}
		prof.Args = []string{"--max-model-len", strconv.Itoa(req.context())}
		if lay.ExpertParallel {
			// The experts whole on each card rather than each sliced
			// across them: less traffic between the cards for every token.
			prof.Args = append(prof.Args, "--enable-expert-parallel")
		}
	case lay.CPU:
		prof.Name = "cpu"
		prof.Args = catalog.LlamaArgs(sizing)
		prof.MinMemoryGB, prof.CPUCores = p.memGB, p.cores()
	default:
		prof.Name = fmt.Sprintf("gpu-%dx%s", cards, strings.ToLower(lay.Class))
		prof.GPUClass, prof.GPUsPerNode = lay.Class, cards
		prof.Args = catalog.LlamaArgs(sizing)
	}
	return prof
}

// cores is what a CPU replica computes on: as asked, else half the smallest
// node it fits on when the fleet can say, else the engine's default.
func (p *pipeline) cores() int {
	if p.req.CPUCores > 0 {
		return p.req.CPUCores
	}
	if nc, ok := p.s.deps.Fleet.(interface{ NodeCPUs(memGB int) []int }); ok {
		return catalog.SuggestCores(nc.NodeCPUs(p.memGB))
	}
	return 0
}

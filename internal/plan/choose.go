package plan

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"strings"

	"modelserve/catalog"
	"modelserve/internal/hf"
	"modelserve/internal/operr"
	"modelserve/internal/words"
)

// A serve job asks the plan twice, and only the plan: Choose, before a
// byte is fetched, for the file set, its projector and where it runs; and
// Serve, once the weights' header is read from the mirror, for the
// catalog's profiles, sized. Picking a file, finding a projector, laying
// it out and sizing it were four steps the job went back and forth
// between itself and the plan for.

// DefaultQuant is the quantisation served when neither the request nor a
// plan says: about a quarter of the original size, and close to it in
// quality.
const DefaultQuant = "Q4_K_M"

// Want is what a request says of the file to serve and where: a set by
// file or set name, else by quantisation (else the plan's
// recommendation, else DefaultQuant); a vision projector by path or file
// name; and the layout.
type Want struct {
	File, Quant, Projector string
	Layout                 LayoutRequest
}

// Choice is what a model is served from, and where: the file set, its
// projector (nil for none), and its layouts, the first chosen and the
// fallbacks after it.
type Choice struct {
	Set       hf.FileSet
	Projector *hf.File
	Layouts   []Option
}

// First is where the choice runs first: its chosen layout.
func (c Choice) First() Option { return c.Layouts[0] }

// Choose picks the file set, the projector and the layouts for w, with
// plan when one was made (planned). A name that matches nothing is
// answered with what the repository has, and a set that lacks shards
// names them.
func Choose(repo hf.Repo, plan Plan, planned bool, w Want) (Choice, error) {
	var c Choice
	var err error
	if w.Layout.Format == FormatSafetensors {
		c.Set, err = pickOriginal(repo)
	} else {
		if w.File == "" && w.Quant == "" {
			if rec, ok := plan.Recommended(); planned && ok {
				w.File = rec.Artifact
			} else {
				w.Quant = DefaultQuant
			}
		}
		c.Set, err = pickGGUF(repo, w)
	}
	if err != nil {
		return Choice{}, err
	}
	if w.Projector != "" {
		f, err := projectorOf(repo, w.Projector)
		if err != nil {
			return Choice{}, err
		}
		c.Projector = &f
	}
	if c.Layouts, err = ChooseLayout(w.Layout, plan, planned, c.Set); err != nil {
		return Choice{}, err
	}
	return c, nil
}

// Extra is what a profile carries beside its sizing, from the request:
// the engine's settings, the RAM the first profile reserves on CPUs in
// place of its sizing (0: the sizing's), and the cores a CPU replica
// holding need bytes computes on.
type Extra struct {
	Env         map[string]string
	MemoryBytes int64
	Cores       func(need int64) int
}

// Serve sizes the choice on m (its header as read from the mirror) as ask
// asks, against the pool's nodes, and says how it runs as the catalog's
// profiles: the first layout as sized, then each fallback that can hold
// the same context, lower in priority. The sizing returned is the first's.
func (c Choice) Serve(m Model, ask Ask, nodes []Node, x Extra) (Sizing, []catalog.Profile, error) {
	// A header that says it embeds is an embedding model, asked or not.
	ask.Embeddings = ask.Embeddings || m.Header.Embedding
	sz := Size(m, c.Layouts[0], ask, nodes)
	if sz.Fit == FitsNowhere {
		return sz, nil, refused("%s %s", c.Set.Name, sz.Reason)
	}
	first := c.profile(c.Layouts[0], sz, ask, 100, x)
	if first.GPUClass == "" && x.MemoryBytes > 0 {
		// The cache keeps within what is reserved, beside the rest.
		first.RAMBytes = x.MemoryBytes
		first.PromptCacheBytes = wholeMiB(min(first.PromptCacheBytes, max(0, x.MemoryBytes-(sz.NeedBytes-sz.PromptCacheBytes))))
		if x.Cores != nil {
			first.CPUCores = x.Cores(first.RAMBytes)
		}
	}
	profiles := []catalog.Profile{first}
	for i, o := range c.Layouts[1:] {
		fz := Size(m, o, Ask{CtxPool: sz.Size.Pool, ContextLength: sz.Size.Context(), Embeddings: ask.Embeddings, Judge: ask.Judge}, nodes)
		if fz.Fit != FitsNowhere {
			profiles = append(profiles, c.profile(o, fz, ask, 90-10*i, x))
		}
	}
	return sz, profiles, nil
}

// profile is layout o, sized sz as ask asked, as a catalog profile: on
// the CPU it holds sz's need of a node's RAM, on cards its need on each
// card and its host share of the node's RAM beside them.
func (c Choice) profile(o Option, sz Sizing, ask Ask, priority int, x Extra) catalog.Profile {
	p := catalog.Profile{Engine: EngineLlamaCpp, Env: x.Env, Priority: priority, Weight: 1,
		Size: sz.Size, Embeddings: ask.Embeddings, Judge: ask.Judge, PromptCacheBytes: sz.PromptCacheBytes}
	if p.Pool > 0 {
		p.Slots = max(p.Slots, 1)
	}
	if o.CPU || o.Class == "" {
		p.Name, p.RAMBytes = "cpu", sz.NeedBytes
		if x.Cores != nil {
			p.CPUCores = x.Cores(p.RAMBytes)
		}
		return p
	}
	cards := max(o.GPUsPerNode, 1)
	p.Name = fmt.Sprintf("gpu-%dx%s", cards, strings.ToLower(o.Class))
	p.GPUClass, p.GPUsPerNode, p.CardBytes, p.RAMBytes = o.Class, cards, sz.NeedBytes, sz.HostBytes
	return p
}

// pickGGUF chooses the GGUF file set to serve: by file or set name, else
// by quantisation. A set that lacks shards is refused naming them, and a
// name that matches nothing is answered with what the repository has.
func pickGGUF(repo hf.Repo, w Want) (hf.FileSet, error) {
	sets := hf.Holds(repo).GGUF
	if len(sets) == 0 {
		return hf.FileSet{}, refused("%s has no GGUF files; the nodes run llama.cpp, which needs one: serve its original weights with the format safetensors, or pick a GGUF repository", repo.ID)
	}
	var match []hf.FileSet
	if w.File != "" {
		for _, st := range sets {
			if st.Name == w.File || slices.ContainsFunc(st.Files, func(f hf.File) bool {
				return f.Path == w.File || path.Base(f.Path) == w.File
			}) {
				match = append(match, st)
			}
		}
	} else {
		want := strings.ToLower(w.Quant)
		for _, st := range sets {
			if strings.EqualFold(st.Quant, w.Quant) {
				match = append(match, st)
			}
		}
		// A name the quantisation reader does not know ("Q4_K_M-imat"):
		// as written in the file name.
		if len(match) == 0 {
			for _, st := range sets {
				if strings.Contains(strings.ToLower(st.Name), want) {
					match = append(match, st)
				}
			}
		}
	}
	if len(match) == 0 {
		names := make([]string, 0, len(sets))
		for _, st := range sets {
			names = append(names, st.Name)
		}
		return hf.FileSet{}, refused("%s has no file matching %s; it has: %s", repo.ID, operr.Quote(cmpOr(w.File, w.Quant)), strings.Join(names, ", "))
	}
	// Both a split and a joined copy of one quantisation: the joined one,
	// which is one download to verify rather than several.
	slices.SortStableFunc(match, func(a, b hf.FileSet) int { return a.Shards - b.Shards })
	set := match[0]
	if len(set.Missing) > 0 {
		return hf.FileSet{}, refused("%s is split into %d shards and %s lacks %s %s: it cannot be served whole; pick another file",
			set.Name, set.Shards, repo.ID, words.Plural(len(set.Missing), "shard", "shards"), joinInts(set.Missing))
	}
	return set, nil
}

// pickOriginal chooses a repository's original weights and the files an
// engine reads beside them: config.json, the tokenizer, the shard index.
func pickOriginal(repo hf.Repo) (hf.FileSet, error) {
	original := hf.Holds(repo).Original
	if original == nil {
		return hf.FileSet{}, refused("%s has no safetensors weights at its top: serve one of its GGUF files instead, or pick another repository", repo.ID)
	}
	set := *original
	if len(set.Missing) > 0 {
		return hf.FileSet{}, refused("%s is split into %d shards and %s lacks %s %s: it cannot be served whole",
			set.Name, set.Shards, repo.ID, words.Plural(len(set.Missing), "shard", "shards"), joinInts(set.Missing))
	}
	companions := hf.Companions(repo.Files)
	if !slices.ContainsFunc(companions, func(f hf.File) bool { return f.Path == "config.json" }) {
		return hf.FileSet{}, refused("%s has no config.json, which vLLM reads the model's shape from: pick a repository that has one", repo.ID)
	}
	for _, f := range companions {
		set.Files = append(set.Files, f)
		set.Bytes += f.Size
	}
	return set, nil
}

// projectorOf finds the vision projector a request names, by path or by
// file name.
func projectorOf(repo hf.Repo, name string) (hf.File, error) {
	all := hf.Projectors(repo.Files)
	i := slices.IndexFunc(all, func(f hf.File) bool { return f.Path == name || path.Base(f.Path) == name })
	if i >= 0 {
		return all[i], nil
	}
	if len(all) == 0 {
		return hf.File{}, refused("%s has no vision projector %s; it has none: serve it without a projector", repo.ID, operr.Quote(name))
	}
	paths := make([]string, 0, len(all))
	for _, f := range all {
		paths = append(paths, f.Path)
	}
	return hf.File{}, refused("%s has no vision projector %s; it has: %s", repo.ID, operr.Quote(name), strings.Join(paths, ", "))
}

// refused is an operator's refusal: what was asked cannot be served here.
func refused(format string, args ...any) error { return operr.New(operr.Refused, format, args...) }

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ServeOriginal says how the choice's original weights run on vLLM as the
// catalog's profiles, from the config.json fetched with them (raw) and
// the vLLM the fleet runs (image, a tag or a version): the model class
// held to that release, and each layout whose cards split its heads
// evenly, the first chosen and the fallbacks after it lower in priority,
// as Serve does for a GGUF file. Each holds its layout's need on each card
// and vLLM's host share of its node's RAM (VLLMHostBytes), and size, its slots' context cut
// to what the model was trained for, and carries the request's engine
// settings (x.Env, which the catalog checks as it checks any profile's).
// The size returned is what the profiles hold.
func (c Choice) ServeOriginal(raw []byte, image string, size catalog.Size, x Extra) (ModelConfig, catalog.Size, []catalog.Profile, error) {
	cfg, err := ParseModelConfig(raw)
	if err != nil {
		return cfg, size, nil, err
	}
	release := VLLMImageVersion(image)
	if !release.Known() {
		release, _ = ParseVLLMVersion(image)
	}
	if err := KnownVLLMArchitectures().Supported(cfg.Architecture, release); err != nil {
		return cfg, size, nil, err
	}
	if err := TensorParallelError(&cfg, c.First().GPUsPerNode); err != nil {
		return cfg, size, nil, err
	}
	size.Slots = max(size.Slots, 1)
	if cfg.MaxPosition > 0 && size.Context() > cfg.MaxPosition {
		size = catalog.SizeForSlots(size.Slots, cfg.MaxPosition)
	}
	var profiles []catalog.Profile
	for i, o := range c.Layouts {
		if i > 0 && TensorParallelError(&cfg, o.GPUsPerNode) != nil {
			continue // a fallback whose cards cannot split the heads
		}
		cards := max(o.GPUsPerNode, 1)
		// A layout a job recorded before vLLM's were sized in bytes says
		// its need in GB alone.
		need := cmp.Or(o.Sizing.NeedBytes, Bytes(o.NeedGB))
		profiles = append(profiles, catalog.Profile{
			Name: fmt.Sprintf("gpu-%dx%s", cards, strings.ToLower(o.Class)), Engine: EngineVLLM,
			GPUClass: o.Class, GPUsPerNode: cards, CardBytes: need, RAMBytes: VLLMHostBytes(cards), Size: size,
			Priority: 100 - 10*len(profiles), Weight: 1, Env: x.Env,
		})
	}
	return cfg, size, profiles, nil
}

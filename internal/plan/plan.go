// Package plan answers an operator's first question about a model — will it
// fit, and which file should I take — before a single gigabyte is fetched.
//
// A repository of GGUF files offers a dozen quantisations of one model, and
// which of them suits the hardware depended on arithmetic somebody did by
// hand: the file's size, the KV cache of the context the model will be
// asked to hold, what the engine adds, each card's memory. Getting it wrong
// was found out late — a 70B whose weights loaded onto a 24 GB card and then
// failed to make its context, an 8B asked for 131072 tokens on one card —
// after the download. This package reads each file's header from the
// registry with a few Range requests (cached by the file's sha256, so a
// repository of twenty 4 GB files costs twenty headers), and works out for
// every file and every shape of the pool (the CPU of a node, N cards of a
// class, several nodes for vLLM) the memory it needs, how many nodes could
// host it now, how fast it would answer and the longest context that fits;
// then it recommends the file to serve and says why in a sentence.
package plan

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"modelserve/catalog"
	"modelserve/internal/operr"
	"slices"
	"strings"
	"sync"

	"modelserve/internal/hf"
	"modelserve/internal/words"
)

// Formats and engines an option names.
const (
	FormatGGUF        = "gguf"
	FormatSafetensors = "safetensors"
	EngineLlamaCpp    = "llamacpp"
	EngineVLLM        = "vllm"
	// Original is the artifact name of a repository's original
	// (safetensors) weights.
	Original = "original"
)

// Where an option can run: now (a node has the memory free), on the
// hardware the pool has (but it is in use), or nowhere in this pool.
const (
	FitsNow      = "now"
	FitsHardware = "hardware"
	FitsNowhere  = "nowhere"
)

// DefaultContext is the pool of tokens planned for when a request names
// none, before it is shrunk to fit (see Size).
const DefaultContext = DefaultPool

// Request is what a plan is made for.
type Request struct {
	// Size is the pool of tokens the engine holds (llama.cpp's
	// --ctx-size, vLLM's --max-model-len) and the requests that share it:
	// DefaultContext when the pool is zero, and pool/4096 slots (at least
	// one) when the slots are.
	Size catalog.Size
	// Format is "gguf", "safetensors" or empty for both.
	Format string
	// Longest sizes the GGUF options to the longest context that fits,
	// when the pool is zero.
	Longest bool
}

// Option is one way to run one artifact: a file set on the CPU of a node, or
// on cards of a class.
type Option struct {
	// Artifact is the GGUF set's name, or "original" for the safetensors
	// weights.
	Artifact string `json:"artifact"`
	Quant    string `json:"quant,omitempty"`
	Format   string `json:"format"`
	Engine   string `json:"engine"`
	// CPU runs it on a node's CPU; otherwise GPUsPerNode cards of Class
	// on each of Nodes nodes.
	CPU         bool   `json:"cpu,omitempty"`
	Class       string `json:"class,omitempty"`
	GPUsPerNode int    `json:"gpus_per_node,omitempty"`
	Nodes       int    `json:"nodes,omitempty"`
	// NeedGB is the memory it needs on each card, or of a node's RAM on
	// the CPU, for Context tokens: (weights + KV cache + engine) / cards.
	NeedGB     float64 `json:"need_gb"`
	WeightsGB  float64 `json:"weights_gb"`
	KVGB       float64 `json:"kv_gb"`
	OverheadGB float64 `json:"overhead_gb"`
	Context    int     `json:"context"`
	// Hosts is how many nodes have its share free now; Capable how many
	// have the hardware for it, in use or not.
	Hosts   int    `json:"hosts"`
	Capable int    `json:"capable"`
	Fit     string `json:"fit"`
	// Why says what stops it, for an option that does not fit now.
	Why string `json:"why,omitempty"`
	// TokensPerSecond is an estimate for one reply: the memory bandwidth
	// over the bytes each token reads. It is a ceiling; engines reach
	// half to four fifths of it. Zero for an embedding model.
	TokensPerSecond float64 `json:"tokens_per_second"`
	// LongestContext is the longest context one request may have on this
	// shape's hardware, in LongestSlots slots (Size with Ask.Longest): what
	// the serve form offers first. 0 when nothing fits or the shape is
	// unknown.
	LongestContext int `json:"longest_context"`
	LongestSlots   int `json:"longest_slots,omitempty"`
	// Sizing is the engine's context and the memory of each part for the
	// plan's request on this hardware, for llama.cpp: what the job will
	// start the engine with (Size).
	Sizing Sizing `json:"sizing"`
	// ExpertParallel spreads a mixture of experts' experts whole over
	// vLLM's cards rather than slicing each.
	ExpertParallel bool `json:"expert_parallel,omitempty"`
	// Estimated marks memory worked out without the file's header.
	Estimated bool `json:"estimated,omitempty"`
}

// GPUs is how many cards the option takes in all.
func (o Option) GPUs() int {
	if o.CPU || o.Class == "" {
		return 0
	}
	return max(o.GPUsPerNode, 1) * max(o.Nodes, 1)
}

// Label names the shape: "CPU", "2×A100-80GB", "2 nodes × 8×H100-80GB".
func (o Option) Label() string {
	switch {
	case o.CPU:
		return "CPU"
	case o.Class == "":
		return "unplanned"
	case max(o.Nodes, 1) > 1:
		return fmt.Sprintf("%d nodes × %d×%s", o.Nodes, max(o.GPUsPerNode, 1), o.Class)
	}
	return fmt.Sprintf("%d×%s", max(o.GPUsPerNode, 1), o.Class)
}

// Longest is the longest context that fits on this shape's hardware, as
// a serving size: LongestSlots slots of LongestContext tokens.
func (o Option) Longest() catalog.Size {
	return catalog.SizeForSlots(o.LongestSlots, o.LongestContext)
}

// WithContext is the option's memory for another context, given the KV
// cache each token takes.
func (o Option) WithContext(kvBytesPerToken int64, tokens int) Option {
	if kvBytesPerToken > 0 && tokens > 0 {
		o.KVGB = round2(GiB(kvBytesPerToken * int64(tokens)))
		o.Context = tokens
	}
	o.NeedGB = round2((o.WeightsGB + o.KVGB + o.OverheadGB) / float64(max(o.GPUs(), 1)))
	return o
}

// needText is what the option needs in words: the bytes Size worked out
// when it was sized (the figure the serve form's memory bar adds up to),
// else NeedGB. Said from NeedGB, rounded to a hundredth of a GiB, the
// headline above the bar said 573.4 MB where the bar said 569.9.
func (o Option) needText() string {
	if o.Sizing.NeedBytes > 0 {
		return words.Size(o.Sizing.NeedBytes)
	}
	return words.GB(o.NeedGB)
}

// round2 keeps figures in GB to two decimals: what a page shows and a
// sentence says, without float noise in the JSON.
func round2(gb float64) float64 { return math.Round(gb*100) / 100 }

// MemoryText says what the option needs and of what: "40.5 GB on each of 2
// A100-80GB cards (weights 69.9 GB + KV cache 10.0 GB for 32768 tokens +
// engine 1.1 GB)".
func (o Option) MemoryText() string {
	basis := fmt.Sprintf("weights %s + KV cache %s for %d tokens + engine %s",
		words.GB(o.WeightsGB), words.GB(o.KVGB), o.Context, words.GB(o.OverheadGB))
	if o.Estimated {
		basis = fmt.Sprintf("weights %s plus half again plus two; the header gave no shape", words.GB(o.WeightsGB))
	}
	return fmt.Sprintf("%s %s (%s)", o.needText(), o.onWhat(), basis)
}

// onWhat is where the memory is needed, for sentences.
func (o Option) onWhat() string {
	switch n := o.GPUs(); {
	case o.CPU:
		return "of a node's RAM"
	case n == 0:
		return "on the hardware asked for"
	case n == 1:
		return "on " + article(o.Class) + " " + o.Class
	case max(o.Nodes, 1) > 1:
		return fmt.Sprintf("on each of %d %s cards, %d on each of %d nodes", n, o.Class, o.GPUsPerNode, o.Nodes)
	default:
		return fmt.Sprintf("on each of %d %s cards", n, o.Class)
	}
}

// where is the shape for a reason sentence: "on an L4", "on 2 A100-80GB
// cards", "on the CPU".
func (o Option) where() string {
	switch n := o.GPUs(); {
	case o.CPU:
		return "on the CPU"
	case n == 1:
		return "on " + article(o.Class) + " " + o.Class
	case max(o.Nodes, 1) > 1:
		return fmt.Sprintf("on %d nodes of %d %s cards", o.Nodes, o.GPUsPerNode, o.Class)
	default:
		return fmt.Sprintf("on %d %s cards", n, o.Class)
	}
}

// article is "an" before a card name read out with a vowel sound (an L4,
// an A100, an H100, an RTX-4090) and "a" otherwise (a T4, a V100); a card
// outside the table gets "one", as its name may be a word.
func article(class string) string {
	if _, known := LookupClass(class); !known {
		return "one"
	}
	if class != "" && strings.ContainsRune("AEFHILMNORSX", rune(class[0])) {
		return "an"
	}
	return "a"
}

// SetPlan is what the planner read of one artifact.
type SetPlan struct {
	hf.FileSet
	Format string `json:"format"`
	// Architecture and the rest are from the header of the set's first
	// shard; empty when it could not be read.
	Architecture   string `json:"architecture,omitempty"`
	TrainedContext int    `json:"trained_context,omitempty"`
	// Planned is false for a set with shards missing, and for the split
	// copy of a file the repository also has joined.
	Planned bool `json:"planned"`
	// Note says why the set is not planned, or planned on an estimate.
	Note string `json:"note,omitempty"`
}

// Plan is what a repository's files need and where each can run.
type Plan struct {
	Repo   string `json:"repo"`
	Commit string `json:"commit"`
	// Size is what it is planned for; its JSON is the plan's own
	// "context" (the pool) and "parallel" (its slots), as scripts read
	// them (planWire).
	Size catalog.Size `json:"-"`
	// The model's shape, from the first header read.
	Architecture    string `json:"architecture,omitempty"`
	TrainedContext  int    `json:"trained_context,omitempty"`
	Embedding       bool   `json:"embedding,omitempty"`
	Experts         int    `json:"experts,omitempty"`
	ExpertsUsed     int    `json:"experts_used,omitempty"`
	KVBytesPerToken int64  `json:"kv_bytes_per_token"`
	// ModelConfig is the original weights' config.json as vLLM reads it,
	// when the repository has both and it was read.
	ModelConfig *ModelConfig `json:"model_config,omitempty"`
	Sets        []SetPlan    `json:"sets"`
	// Options are every way every artifact can run, best first: what fits
	// now before what fits the hardware before what fits nowhere, then
	// the faster.
	Options []Option `json:"options"`
	// Choice is the file to serve by default, and Reason says why in a
	// sentence (or why there is none).
	Choice *Option  `json:"recommended,omitempty"`
	Reason string   `json:"reason"`
	Notes  []string `json:"notes,omitempty"`
}

// Recommended is the file to serve when the operator names none: the best
// quality that fits the pool with the asked context, on its best option.
func (p Plan) Recommended() (Option, bool) {
	if p.Choice == nil {
		return Option{}, false
	}
	return *p.Choice, true
}

// For is the plan's options for one artifact, best first.
func (p Plan) For(artifact string) []Option {
	var out []Option
	for _, o := range p.Options {
		if o.Artifact == artifact {
			out = append(out, o)
		}
	}
	return out
}

// Config is what a Planner needs.
type Config struct {
	// Pool is the hardware now; required (Pool.Nodes).
	Pool func() []Node
	// Headers reads a GGUF header from a URL or path; required.
	Headers HeaderReader
	// Configs reads the config.json of original weights, which vLLM
	// sizes them by; without it they are sized from a GGUF header of the
	// same repository, or not at all.
	Configs ConfigReader
	// DownloadURL is where a file of a repository at a commit is read;
	// required (hf.Registry's DownloadURL).
	DownloadURL func(id, commit, path string) string
	// Concurrency bounds the headers read at once: 1 when zero.
	// gguf-parser-go v0.28.1 corrupts headers it reads over HTTP at the
	// same time (a data race in its pooled buffers; 3 of 40 concurrent
	// reads failed here), so raise it only with a reader that is safe.
	Concurrency int
	Log         *slog.Logger
}

// Planner makes plans. Safe for concurrent use.
type Planner struct {
	cfg   Config
	cache *headerCache
}

// New checks the configuration and builds a Planner.
func New(cfg Config) (*Planner, error) {
	switch {
	case cfg.Pool == nil:
		return nil, errors.New("the planner needs the pool of nodes: set Config.Pool")
	case cfg.Headers == nil:
		return nil, errors.New("the planner needs a header reader: set Config.Headers")
	case cfg.DownloadURL == nil:
		return nil, errors.New("the planner needs the registry's download URLs: set Config.DownloadURL")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Planner{cfg: cfg, cache: newHeaderCache()}, nil
}

// Plan works out where each of a repository's artifacts can run on the pool
// as it is now, reading each GGUF set's header (not its weights).
func (p *Planner) Plan(ctx context.Context, repo hf.Repo, req Request) (Plan, error) {
	switch req.Format {
	case "", FormatGGUF, FormatSafetensors:
	default:
		return Plan{}, operr.New(operr.Invalid, "the format is gguf or safetensors, not %s", operr.Quote(req.Format))
	}
	if err := req.Size.Check(); err != nil {
		return Plan{}, err
	}
	pl := Plan{Repo: repo.ID, Commit: repo.Commit, Sets: []SetPlan{}, Options: []Option{}}
	holds := hf.Holds(repo)
	ggufSets, original := holds.GGUF, holds.Original
	if original != nil && len(original.Missing) > 0 {
		original = nil // not whole: nothing vLLM could load
	}
	if len(ggufSets) == 0 && original == nil {
		return Plan{}, operr.New(operr.Refused, "%s has neither GGUF files nor safetensors weights: nothing here for llama.cpp or vLLM to run", repo.ID)
	}
	if req.Format == FormatSafetensors && original == nil {
		return Plan{}, operr.New(operr.Refused, "%s has no safetensors weights at its top: plan its GGUF files instead", repo.ID)
	}
	if req.Format == FormatGGUF && len(ggufSets) == 0 {
		return Plan{}, operr.New(operr.Refused, "%s has no GGUF files; llama.cpp needs one: plan its safetensors weights with vLLM instead", repo.ID)
	}

	// The headers first: whether it is an embedding model decides the
	// context planned for. For the original weights one header is enough:
	// it gives the shape their KV cache is worked out from.
	shapes := make([]*shape, len(ggufSets))
	errs := make([]error, len(ggufSets))
	var wg sync.WaitGroup
	sem := make(chan struct{}, p.cfg.Concurrency)
	reading := 0
	for i, set := range ggufSets {
		if len(set.Missing) > 0 || holds.SplitCopy(i) || (req.Format == FormatSafetensors && reading > 0) {
			continue
		}
		reading++
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			first := set.Files[0]
			shapes[i], errs[i] = p.cache.get(ctx, first.SHA256, p.cfg.DownloadURL(repo.ID, repo.Commit, first.Path), p.cfg.Headers)
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Plan{}, err
	}
	// The model's shape from the first header that gives one: every
	// quantisation of a model has the same.
	var model *shape
	for _, s := range shapes {
		if s != nil && s.shaped {
			model = s
			break
		}
	}
	if model != nil {
		pl.Architecture, pl.TrainedContext, pl.Embedding = model.arch, model.trained, model.embedding
		pl.Experts, pl.ExpertsUsed, pl.KVBytesPerToken = model.experts, model.expertsUsed, model.kvPerToken
	}
	var configNote string
	if original != nil && req.Format != FormatGGUF {
		pl.ModelConfig, configNote = p.readConfig(ctx, repo)
		if c := pl.ModelConfig; c != nil && model == nil {
			// What vLLM runs: its shape from its own config.
			pl.Architecture, pl.TrainedContext = c.Architecture, c.MaxPosition
			pl.Experts, pl.ExpertsUsed, pl.KVBytesPerToken = c.Experts, c.ExpertsUsed, c.KVBytesPerToken()
		}
	}
	pl.Size = req.Size
	if pl.Size.Pool == 0 {
		pl.Size.Pool = DefaultContext
		if pl.Embedding {
			pl.Size = catalog.Size{Pool: EmbedSlotTokens * EmbedSlots, Slots: cmp.Or(pl.Size.Slots, EmbedSlots)}
		}
	}
	if pl.Size.Slots == 0 {
		pl.Size.Slots = Ask{CtxPool: pl.Size.Pool, Embeddings: pl.Embedding}.Shape().Slots
	}
	if pl.TrainedContext > 0 && pl.Size.Context() > pl.TrainedContext {
		pl.Notes = append(pl.Notes, fmt.Sprintf("each slot of %s holds more than the %d tokens the model was trained for",
			pl.Size.Words(), pl.TrainedContext))
	}

	// The GGUF options are sized by Size: as asked, or the defaults that
	// fit where each runs.
	ask := Ask{Longest: req.Longest, Embeddings: pl.Embedding}
	if req.Size.Pool > 0 {
		ask.CtxPool = req.Size.Pool
		if req.Size.Slots > 0 {
			ask.ContextLength = max(1, req.Size.Context())
		}
	}
	nodes := p.cfg.Pool()
	if len(nodes) == 0 {
		pl.Notes = append(pl.Notes, "the pool has no nodes: nothing fits anywhere until one is declared or read")
	}
	if req.Format != FormatSafetensors {
		for i, set := range ggufSets {
			sp := SetPlan{FileSet: set, Format: FormatGGUF}
			switch {
			case len(set.Missing) > 0:
				sp.Note = fmt.Sprintf("not planned: shard(s) %s of %d are missing from the repository", joinInts(set.Missing), set.Shards)
			case holds.SplitCopy(i):
				// A joined and a split copy of one file share a name; the
				// joined one, sorted first, is planned and served.
				sp.Note = "not planned: a split copy of the file above, which is planned in its place"
			case errs[i] != nil && repo.Gated != "":
				// The usual case, and the registry's sentence for it is
				// shown where the repository is: no need to repeat it per file.
				sp.Note = "planned on an estimate: the repository is gated, and its header could not be read with this token"
				p.cfg.Log.Warn("reading a GGUF header to plan", "repo", repo.ID, "file", set.Files[0].Path, "err", errs[i])
			case errs[i] != nil && isSentence(errs[i]):
				// The file's own fault (a header made to harm, a damaged
				// one): said as the reader refused it.
				msg, _ := operr.Sentence(errs[i])
				sp.Note = "planned on an estimate: its header was refused: " + msg
			case errs[i] != nil:
				// The cause is the reader's, not a sentence for the page.
				sp.Note = "planned on an estimate: its header could not be read (the server's log says why)"
				p.cfg.Log.Warn("reading a GGUF header to plan", "repo", repo.ID, "file", set.Files[0].Path, "err", errs[i])
			}
			if s := shapes[i]; s != nil {
				sp.Architecture, sp.TrainedContext = s.arch, s.trained
			}
			sp.Planned = !strings.HasPrefix(sp.Note, "not planned")
			pl.Sets = append(pl.Sets, sp)
			if !sp.Planned {
				continue
			}
			pl.Options = append(pl.Options, ggufOptions(set, shapes[i], pl, ask, nodes)...)
		}
	}
	if original != nil && req.Format != FormatGGUF {
		sp := SetPlan{FileSet: *original, Format: FormatSafetensors, Architecture: pl.Architecture,
			TrainedContext: pl.TrainedContext, Planned: true}
		if c := pl.ModelConfig; c != nil {
			sp.Architecture, sp.TrainedContext = c.Architecture, c.MaxPosition
		} else if model == nil {
			sp.Note = "the KV cache is not counted: " + cmp.Or(configNote, "there is no config.json or GGUF header to read the model's shape from")
		}
		pl.Sets = append(pl.Sets, sp)
		pl.Options = append(pl.Options, vllmOptions(*original, model, pl, nodes)...)
	}
	slices.SortStableFunc(pl.Options, better)
	pl.Choice, pl.Reason = recommend(pl)
	return pl, nil
}

// better orders options best first.
func better(a, b Option) int {
	return cmp.Or(
		cmp.Compare(fitRank(a.Fit), fitRank(b.Fit)),
		cmp.Compare(b.TokensPerSecond, a.TokensPerSecond),
		cmp.Compare(a.GPUs(), b.GPUs()),
		cmp.Compare(hf.QuantRank(b.Quant), hf.QuantRank(a.Quant)),
		strings.Compare(a.Artifact, b.Artifact),
	)
}

func fitRank(f string) int {
	switch f {
	case FitsNow:
		return 0
	case FitsHardware:
		return 1
	}
	return 2
}

// ggufOptions are the ways llama.cpp can run a set: on each node's CPU, and
// on 1, 2, 4 or 8 cards of each class in the pool, on one node (llama.cpp
// does not span nodes). Per class the shapes are listed from one card up to
// the first that holds it, so the refused smaller ones say why.
func ggufOptions(set hf.FileSet, s *shape, pl Plan, ask Ask, nodes []Node) []Option {
	base := Option{Artifact: set.Name, Quant: set.Quant, Format: FormatGGUF, Engine: EngineLlamaCpp}
	m := Model{WeightsBytes: set.Bytes}
	if s != nil {
		m.Header = s.header
	}
	active := float64(set.Bytes)
	if s != nil {
		active *= s.activeShare()
	}
	var out []Option
	cpu := base
	cpu.CPU = true
	cpu = sized(cpu, m, ask, nodes)
	out = append(out, placeCPU(cpu, active, nodes))
	for _, class := range poolClasses(nodes) {
		for _, n := range []int{1, 2, 4, 8} {
			if n > maxCards(nodes, class) {
				break
			}
			o := base
			o.Class, o.GPUsPerNode, o.Nodes = class, n, 1
			o = sized(o, m, ask, nodes)
			o = placeGPU(o, active, s, pl, nodes)
			out = append(out, o)
			if o.Fit != FitsNowhere {
				break
			}
		}
	}
	if pl.Embedding {
		for i := range out {
			out[i].TokensPerSecond = 0
		}
	}
	return out
}

// sized is o with the sizing of m on its hardware as ask asks, and the
// longest context that fits there, from Size: the figures the serve page
// shows are those the job starts the engine with.
func sized(o Option, m Model, ask Ask, nodes []Node) Option {
	o.Sizing = Size(m, o, ask, nodes)
	longest := Size(m, o, Ask{Longest: true, Embeddings: ask.Embeddings}, nodes)
	if longest.Fit != FitsNowhere {
		o.LongestContext, o.LongestSlots = longest.Size.Context(), longest.Size.Slots
	}
	sz := o.Sizing
	o = o.withSizing(sz)
	o.Context = sz.Size.Pool
	o.Estimated = sz.Estimated
	o.Fit = sz.Fit
	if sz.Fit != FitsNow || sz.Shrunk {
		o.Why = sz.Reason
	}
	return o
}

// vLLM's share of each card: it takes 90% of the card's memory
// (--gpu-memory-utilization's default, which the fleet passes) and spends
// some on the CUDA context, activations and CUDA graphs before the KV
// cache.
const (
	VLLMGPUMemoryUtilization = 0.9
	vllmUtilisation          = VLLMGPUMemoryUtilization
	vllmCardReserveBytes     = 2 << 30
)

// vllmOptions are the ways vLLM can run the original weights: 1, 2, 4 or 8
// cards of a class on one node, and, when a node's cards do not hold it,
// as many such nodes as it takes (pipeline parallel between them).
func vllmOptions(set hf.FileSet, s *shape, pl Plan, nodes []Node) []Option {
	base := Option{Artifact: Original, Format: FormatSafetensors, Engine: EngineVLLM, Context: pl.Size.Pool}
	active := float64(set.Bytes)
	if s != nil {
		active *= s.activeShare()
	}
	if c := pl.ModelConfig; c != nil {
		// vLLM's own reading of the model beats a GGUF copy's.
		s, active = &shape{kvPerToken: c.KVBytesPerToken()}, float64(set.Bytes)*c.activeShare()
	}
	var kvPerToken int64
	if s != nil {
		kvPerToken = s.kvPerToken
	}
	var out []Option
	for _, class := range poolClasses(nodes) {
		perNode := maxCards(nodes, class)
		hostsOfClass := 0
		for _, n := range nodes {
			if total, _ := n.cards(class, 0); total > 0 {
				hostsOfClass++
			}
		}
		var shapes [][2]int
		for _, g := range []int{1, 2, 4, 8} {
			if (g <= perNode || g == 1) && TensorParallelError(pl.ModelConfig, g) == nil {
				shapes = append(shapes, [2]int{g, 1})
			}
		}
		top := shapes[len(shapes)-1][0]
		for k := 2; k <= max(hostsOfClass, 1); k *= 2 {
			shapes = append(shapes, [2]int{top, k})
		}
		usable := vllmCardRoom(cardMemory(nodes, class))
		for _, sh := range shapes {
			o := base
			o.Class, o.GPUsPerNode, o.Nodes = class, sh[0], sh[1]
			o = o.withSizing(vllmSizing(set.Bytes, kvPerToken, pl.Size, o))
			o.ExpertParallel = pl.Experts > 1 && o.GPUs() > 1
			o = placeGPU(o, active, s, pl, nodes)
			if pl.Embedding {
				o.TokensPerSecond = 0
			}
			out = append(out, o)
			if o.Fit != FitsNowhere || usable >= o.Sizing.NeedBytes {
				break
			}
		}
	}
	return out
}

// vllmCardRoom is what vLLM takes of a card of mem bytes
// (--gpu-memory-utilization).
func vllmCardRoom(mem int64) int64 { return int64(float64(mem) * vllmUtilisation) }

// vllmSizing is vLLM's memory for the weights (weights bytes in all) on
// o's cards with a pool of size's tokens, kvPerToken bytes each (0: not
// known): on each card its slice of the weights and of the KV cache and
// vLLM's own reserve; on each node the host share of VLLMHostBytes.
func vllmSizing(weights, kvPerToken int64, size catalog.Size, o Option) Sizing {
	cards := int64(max(o.GPUs(), 1))
	s := Sizing{Size: size, WeightsBytes: weights / cards, KVBytes: kvPerToken * int64(size.Pool) / cards,
		ComputeBytes: vllmCardReserveBytes, HostBytes: VLLMHostBytes(o.GPUsPerNode)}
	s.NeedBytes = s.WeightsBytes + s.KVBytes + s.ComputeBytes
	return s
}

// withSizing is o with sz, and the figures in GB its JSON and its
// sentences say, for all its cards (the need for each).
func (o Option) withSizing(sz Sizing) Option {
	cards := int64(max(o.GPUs(), 1))
	o.Sizing = sz
	o.NeedGB = round2(GiB(sz.NeedBytes))
	o.WeightsGB = round2(GiB(sz.WeightsBytes * cards))
	o.KVGB = round2(GiB(sz.KVBytes * cards))
	o.OverheadGB = round2(GiB((sz.ComputeBytes + sz.ProjectorBytes) * cards))
	return o
}

// placeCPU counts the nodes whose RAM holds the option, now and at all,
// and how fast the fastest of them would answer. Where it fits is the
// sizing's to say.
func placeCPU(o Option, active float64, nodes []Node) Option {
	var bestNow, bestAny float64
	need := o.Sizing.NeedBytes
	for _, n := range nodes {
		if n.CPUCores == 0 {
			continue
		}
		if n.RAMBytes >= need {
			o.Capable++
			bestAny = max(bestAny, n.CPUBandwidthGBs)
		}
		if n.FreeRAMBytes >= need {
			o.Hosts++
			bestNow = max(bestNow, n.CPUBandwidthGBs)
		}
	}
	bw := cmp.Or(bestNow, bestAny, DefaultCPUBandwidthGBs)
	o.TokensPerSecond = tokensPerSecond(bw, active)
	return o
}

// placeGPU counts the nodes with GPUsPerNode cards of the class that hold
// the option's share of each card (its sizing's need, within what the
// engine takes of a card), and its host share in their RAM, now and at
// all.
func placeGPU(o Option, active float64, s *shape, pl Plan, nodes []Node) Option {
	room := func(mem int64) int64 { return mem }
	if o.Engine == EngineVLLM {
		room = vllmCardRoom
	}
	need, host := o.Sizing.NeedBytes, o.Sizing.HostBytes
	bw, carded := 0.0, 0
	for _, n := range nodes {
		g, ok := n.class(o.Class)
		if !ok || room(g.MemoryBytes) < need {
			continue
		}
		total, free := n.cards(o.Class, need)
		if total >= o.GPUsPerNode {
			carded++
			if n.RAMBytes >= host {
				o.Capable++
				bw = max(bw, g.BandwidthGBs)
			}
		}
		if free >= o.GPUsPerNode && n.FreeRAMBytes >= host {
			o.Hosts++
		}
	}
	if bw == 0 {
		bw = UnknownCardBandwidthGBs
		if c, ok := LookupClass(o.Class); ok {
			bw = c.BandwidthGBs
		}
	}
	// llama.cpp splits the layers over its cards, which take turns: one
	// card's bandwidth. vLLM slices every layer over a node's cards, which
	// read their slices at once; the nodes of a pipeline take turns.
	rate := bw
	if o.Engine == EngineVLLM {
		rate *= float64(max(o.GPUsPerNode, 1))
	}
	o.TokensPerSecond = tokensPerSecond(rate, active)
	if o.Engine == EngineLlamaCpp {
		// Sized by Size, which said where it fits and why.
		return o
	}
	usable := room(cardMemory(nodes, o.Class))
	busy := fmt.Sprintf("no node has %d %s card(s) with %s free each", o.GPUsPerNode, o.Class, words.Size(need))
	if ramNow, _, cardsFree := hostRoom(nodes, o.Class, o.GPUsPerNode, need); cardsFree && ramNow < host {
		busy = hostBusy(host, ramNow)
	}
	var nowhere string
	switch {
	case usable < need:
		nowhere = fmt.Sprintf("needs %s a card with a %d-token pool; %s %s has %s",
			words.Size(need), o.Context, article(o.Class), o.Class, words.Size(usable))
	case carded >= max(o.Nodes, 1):
		_, ram, _ := hostRoom(nodes, o.Class, o.GPUsPerNode, need)
		nowhere = hostShort(host, ram)
	case max(o.Nodes, 1) > 1:
		nowhere = fmt.Sprintf("the pool has fewer than %d nodes with %d %s cards", o.Nodes, o.GPUsPerNode, o.Class)
	default:
		nowhere = fmt.Sprintf("no node has %d %s cards", o.GPUsPerNode, o.Class)
	}
	o.Fit, o.Why = fit(o, busy, nowhere)
	// vLLM's KV cache is what its share of the cards leaves beside the
	// weights and its own reserve.
	if s != nil && s.kvPerToken > 0 {
		cards := int64(max(o.GPUs(), 1))
		kv := (usable-vllmCardReserveBytes)*cards - o.Sizing.WeightsBytes*cards
		o.LongestContext = cutContext(int(kv/s.kvPerToken), pl.TrainedContext)
	}
	return o
}

// fit says where the option runs; a shape over several nodes needs that
// many hosts at once.
func fit(o Option, busy, nowhere string) (string, string) {
	switch need := max(o.Nodes, 1); {
	case o.Hosts >= need:
		return FitsNow, ""
	case o.Capable >= need:
		return FitsHardware, busy
	}
	return FitsNowhere, nowhere
}

func cutContext(tokens, trained int) int {
	if tokens <= 0 {
		return 0
	}
	if trained > 0 && tokens >= trained {
		// A model trained for fewer than 1024 tokens (some embedding
		// models: 512) keeps its own figure.
		return trained
	}
	return tokens / 1024 * 1024
}

// tokensPerSecond is bandwidth (GB/s, as datasheets count: 10⁹ bytes) over
// the bytes each token reads.
func tokensPerSecond(bandwidthGBs, activeBytes float64) float64 {
	if activeBytes <= 0 {
		return 0
	}
	return math.Round(bandwidthGBs*1e9/activeBytes*10) / 10
}

// poolClasses are the classes of card the pool's nodes have, in the order
// the nodes list them.
func poolClasses(nodes []Node) []string {
	var out []string
	for _, n := range nodes {
		for _, g := range n.GPUs {
			if g.Count > 0 && !slices.Contains(out, g.Class) {
				out = append(out, g.Class)
			}
		}
	}
	return out
}

// maxCards is the most cards of a class any one node has.
func maxCards(nodes []Node, class string) int {
	most := 0
	for _, n := range nodes {
		total, _ := n.cards(class, 0)
		most = max(most, total)
	}
	return most
}

// cardMemory is the largest memory a card of the class has in the pool.
func cardMemory(nodes []Node, class string) int64 {
	var most int64
	for _, n := range nodes {
		if g, ok := n.class(class); ok {
			most = max(most, g.MemoryBytes)
		}
	}
	return most
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}

func isSentence(err error) bool {
	_, ok := operr.As(err)
	return ok
}

// planWire is a Plan as its JSON has always said it: the pool as context
// and its slots as parallel.
type planWire struct {
	Repo     string `json:"repo"`
	Commit   string `json:"commit"`
	Context  int    `json:"context"`
	Parallel int    `json:"parallel"`
	planFields
}

// planFields is Plan without its methods, so that planWire encodes its
// other fields the ordinary way.
type planFields Plan

// MarshalJSON writes the plan with its size as context and parallel.
func (pl Plan) MarshalJSON() ([]byte, error) {
	f := planFields(pl)
	return json.Marshal(planWire{Repo: pl.Repo, Commit: pl.Commit, Context: pl.Size.Pool, Parallel: pl.Size.Slots, planFields: f})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (pl *Plan) UnmarshalJSON(b []byte) error {
	var w planWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*pl = Plan(w.planFields)
	pl.Repo, pl.Commit, pl.Size = w.Repo, w.Commit, catalog.Size{Pool: w.Context, Slots: w.Parallel}
	return nil
}

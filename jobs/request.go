package jobs

import (
	"errors"
	"fmt"
	"strings"

	"modelserve/catalog"
	"modelserve/internal/hf"
)

// Request is what to serve. Its JSON is the API's and the console's.
type Request struct {
	// Repo is the registry repository, owner/name, or local/<folder> for a
	// folder of the models directory.
	Repo string `json:"repo"`
	// Revision is the branch, tag or commit to read it at; main unless
	// given. The job pins the commit it resolves to.
	Revision string `json:"revision,omitempty"`
	// Quant picks the file by its quantisation: the planner's recommendation
	// unless given, Q4_K_M without a planner.
	Quant string `json:"quant,omitempty"`
	// File picks it by name instead: a file's path or a set's name.
	File string `json:"file,omitempty"`
	// Projector is a vision model's mmproj file, fetched beside the weights
	// and loaded with them; empty serves text alone.
	Projector string `json:"projector,omitempty"`
	// Format is "gguf", run by llama.cpp, or "safetensors": the original
	// weights with their config and tokenizer, run by vLLM on GPUs.
	Format string `json:"format,omitempty"`
	// Where it runs: on the CPU, or on GPUsPerNode cards of GPUClass on
	// each of Nodes nodes. Left empty, the planner decides, and without one
	// it runs on this node's CPU.
	CPU         bool   `json:"cpu,omitempty"`
	GPUClass    string `json:"gpu_class,omitempty"`
	GPUsPerNode int    `json:"gpus_per_node,omitempty"`
	Nodes       int    `json:"nodes,omitempty"`
	// Engine is the engine the file runs on; empty, the format's own
	// (llama.cpp for GGUF, vLLM for safetensors).
	Engine string `json:"engine,omitempty"`
	// Name is the catalog name; the repository suggests one otherwise.
	Name        string   `json:"name,omitempty"`
	Aliases     []string `json:"aliases,omitempty"`
	Description string   `json:"description,omitempty"`
	// Replicas to run; 0 makes it on demand, loaded when first asked for.
	Replicas int `json:"replicas"`
	// GuardFormat makes it a judge model for the guardrails: llamaguard3,
	// qwen3guard, shieldgemma or json. Empty serves clients.
	GuardFormat string `json:"guard_format,omitempty"`
	// Class is what it may take from others and they from it when there is
	// not room for both: critical, standard or opportunistic.
	Class string `json:"class,omitempty"`
	// CtxPool is llama.cpp's --ctx-size, ContextLength what one request may
	// use. Left out, the check step works them out from what the model was
	// trained for and the memory where it runs.
	CtxPool       int `json:"ctx_pool,omitempty"`
	ContextLength int `json:"context_length,omitempty"`
	// Tools says the model makes tool calls; it is written into the catalog.
	Tools bool `json:"tools,omitempty"`
	// Embeddings serves it as an embedding model, which its GGUF header says
	// by itself for most.
	Embeddings bool `json:"embeddings,omitempty"`
	// CPUCores is what a replica computes on; zero takes half the smallest
	// node it fits on, when the fleet says.
	CPUCores int `json:"cpu_cores,omitempty"`
	// Env is set in the engine's environment: tuning variables only, which
	// the catalog checks.
	Env map[string]string `json:"env,omitempty"`
	// MemoryGB is what a replica on CPUs reserves, in place of the figure
	// worked out from its weights and context.
	MemoryGB int `json:"memory_gb,omitempty"`

	// IfAbsent adds the model only if nobody has meanwhile: a model the
	// process serves for itself gives way to one an operator added while it
	// fetched, rather than replacing it.
	IfAbsent bool `json:"-"`
	// By is who asked, for the catalog's record.
	By string `json:"-"`
}

// ErrInvalid is a request refused for what it says. Every refusal matches it
// with errors.Is, and its message is a sentence to show as it is (the API
// answers 400 with it).
var ErrInvalid = errors.New("the request is not valid")

// InvalidError is a refused request: Error is the sentence.
type InvalidError struct {
	Reason string
}

func (e *InvalidError) Error() string { return e.Reason }

// Is lets errors.Is(err, ErrInvalid) match every refusal.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(format string, args ...any) error {
	return &InvalidError{Reason: fmt.Sprintf(format, args...)}
}

// Formats a model's files come in.
const (
	FormatGGUF        = "gguf"
	FormatSafetensors = "safetensors"
)

// Engines that run them.
const (
	EngineLlamaCpp = "llamacpp"
	EngineVLLM     = "vllm"
)

// The shape of an embedding model's pool when the caller did not size it:
// passages of up to a thousand tokens, thirty-two at a time. Four slots had an
// import of a hundred thousand chunks go at the pace of four, its card a
// third busy.
const (
	embedSlotTokens = 1024
	embedSlots      = 32
)

// maxSlots is the most slots a pool is given when the caller did not size
// it: four replies at once, as llama.cpp's own default.
const maxSlots = 4

// normalize checks a request as it arrives and fills what it leaves to
// defaults that do not depend on the model. Each refusal is a sentence; a
// refused request starts nothing and stores nothing.
func normalize(req Request) (Request, error) {
	req.Repo = strings.Trim(strings.TrimSpace(req.Repo), "/")
	if err := hf.CheckRepoID(req.Repo); err != nil {
		return req, invalid("%q is not a repository; it looks like owner/name, or local/<folder> for a folder of the models directory", req.Repo)
	}
	req.Revision = strings.TrimSpace(req.Revision)
	if req.Revision == "" {
		req.Revision = "main"
	}
	if req.Replicas < 0 {
		return req, invalid("replicas cannot be negative: give 0 to load it on demand, or how many to keep running")
	}
	if req.GPUsPerNode < 0 || req.Nodes < 0 || req.CPUCores < 0 || req.MemoryGB < 0 {
		return req, invalid("gpus_per_node, nodes, cpu_cores and memory_gb cannot be negative: leave them out to have them worked out")
	}
	if req.CtxPool < 0 || req.ContextLength < 0 {
		return req, invalid("ctx_pool and context_length cannot be negative: leave them out to have them worked out")
	}
	switch req.Format {
	case "", FormatGGUF:
		req.Format = FormatGGUF
	case FormatSafetensors:
		if req.Projector != "" {
			return req, invalid("a projector is for a GGUF model; vLLM reads a vision model's own files: drop the projector, or serve a GGUF file")
		}
		if req.CPU {
			return req, invalid("original weights run on vLLM, on GPUs; a GGUF file runs on the CPU: name a GPU class, or serve a GGUF file")
		}
	default:
		return req, invalid("the format is gguf or safetensors, not %q", req.Format)
	}
	switch req.Engine {
	case "":
	case EngineLlamaCpp:
		if req.Format != FormatGGUF {
			return req, invalid("llama.cpp runs GGUF files, and this asks for %s: drop the engine, or serve a GGUF file", req.Format)
		}
	case EngineVLLM:
		if req.Format != FormatSafetensors {
			return req, invalid("vLLM here runs original (safetensors) weights: give the format safetensors, or drop the engine")
		}
	default:
		return req, invalid("the engine is llamacpp or vllm, not %q", req.Engine)
	}
	if req.CPU && req.GPUClass != "" {
		return req, invalid("it runs on the CPU or on %s cards, not both: drop cpu or gpu_class", req.GPUClass)
	}
	if req.GuardFormat != "" && !catalog.KnownGuardFormat(req.GuardFormat) {
		return req, invalid("the guard format is one of %s, not %q", strings.Join(catalog.GuardFormats(), ", "), req.GuardFormat)
	}
	switch req.Class {
	case "", catalog.ClassCritical, catalog.ClassStandard, catalog.ClassOpportunistic:
	default:
		return req, invalid("the class is critical, standard or opportunistic, not %q", req.Class)
	}
	if req.GuardFormat != "" && req.Replicas == 0 {
		return req, invalid("a judge model must always run: give it 1 or more replicas, not 0 (on demand)")
	}
	if pool, ctx := req.pool(), req.context(); ctx > pool {
		return req, invalid("a request of %d tokens cannot fit a pool of %d: give ctx_pool at least context_length", ctx, pool)
	}
	// The names, aliases and environment as the catalog will judge them,
	// now rather than after a download of hours.
	if err := catalogEntry(req, or(req.Name, hf.ModelName(req.Repo))).Validate(); err != nil {
		return req, &InvalidError{Reason: err.Error()}
	}
	return req, nil
}

// catalogEntry is the part of a catalog entry the request alone decides.
func catalogEntry(req Request, name string) catalog.Model {
	m := catalog.Model{
		Name: name, Aliases: req.Aliases, Description: req.Description, RoutingProfile: "chat",
		Class:        req.Class,
		Scaling:      catalog.Scaling{Min: req.Replicas, Max: max(req.Replicas, 1)},
		Capabilities: catalog.Capabilities{Vision: req.Projector != "", Tools: req.Tools, Embeddings: req.Embeddings},
		// Placeholders, for Validate; the check and the plan replace them.
		ContextLength: req.context(),
		Profiles:      []catalog.Profile{{Name: "request", Env: req.Env}},
	}
	if req.GuardFormat != "" {
		m.Role, m.Guard, m.RoutingProfile = catalog.RoleGuard, &catalog.GuardModel{Format: req.GuardFormat}, ""
	}
	return m
}

// sized is whether the caller said how large the pool or a request's context
// is, which the check step then leaves alone.
func (r Request) sized() bool { return r.CtxPool > 0 || r.ContextLength > 0 }

// pool and context are the request's sizing with the catalog's defaults for
// what it leaves out.
func (r Request) pool() int {
	if r.CtxPool > 0 {
		return r.CtxPool
	}
	return catalog.DefaultCtxPool
}

func (r Request) context() int {
	if r.ContextLength > 0 {
		return r.ContextLength
	}
	return catalog.DefaultContextLength
}

package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"modelserve/internal/operr"
	"strings"
	"time"

	"modelserve/catalog"
	"modelserve/internal/hf"
	"modelserve/internal/plan"
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
	// it runs on this node's CPU. "tp" is GPUsPerNode's older name, which
	// UnmarshalJSON takes for it.
	CPU         bool   `json:"cpu,omitempty"`
	GPUClass    string `json:"gpu_class,omitempty"`
	GPUsPerNode int    `json:"gpus_per_node,omitempty"`
	Nodes       int    `json:"nodes,omitempty"`
	// Fallbacks adds the next best shapes the plan offers, lower in
	// priority, so a model whose first choice is busy runs on another
	// rather than waiting.
	Fallbacks bool `json:"fallbacks,omitempty"`
	// Engine is the engine the file runs on; empty, the format's own
	// (llama.cpp for GGUF, vLLM for safetensors).
	Engine string `json:"engine,omitempty"`
	// Name is the catalog name; the repository suggests one otherwise.
	Name        string   `json:"name,omitempty"`
	Aliases     []string `json:"aliases,omitempty"`
	Description string   `json:"description,omitempty"`
	// Replicas to run; 0 makes it on demand, loaded when first asked for.
	Replicas int `json:"replicas"`
	// IdleAfter is how long replicas started on demand keep running with
	// no request, as a duration ("30s", "15m", from 1s to 168h); left out
	// or "0", the fleet's default. It is written into the catalog entry.
	IdleAfter string `json:"idle_after,omitempty"`
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
	// Longest asks for the longest context that fits where it runs
	// rather than the default pool: "context_length": "max" in JSON.
	Longest bool `json:"longest_context,omitempty"`
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
	// CanaryOf is set by an update (Server.Update), never by a client: the
	// job serves a new version of that catalog model beside it, as its
	// canary (catalog.CanaryName), then judges it (see trial). UpdateID is
	// the update it serves, Share the part of the model's requests the
	// canary takes once its eval has passed.
	CanaryOf string  `json:"canary_of,omitempty"`
	UpdateID int64   `json:"update_id,omitempty"`
	Share    float64 `json:"share,omitempty"`
	// RestoreOf is set by a restore (Server.Restore), never by a client:
	// the version of CanaryOf (catalog.Version's ID) served again, beside
	// the model and then promoted, without a trial.
	RestoreOf int64 `json:"restore_of,omitempty"`
	// InPlace is set by an update or a restore, never by a client: with
	// no room beside the model, the version may replace its replica in
	// place (inplace.go), as the model's update settings allow.
	InPlace bool `json:"in_place,omitempty"`
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

// maxReplicas bounds the replicas one request may ask for: more than any
// fleet here runs of one model, and a typo of 10000 starts nothing.
const maxReplicas = 64

// MaxAliases and MaxDescription bound what a request adds to a catalog
// entry's names and its words: far more than a client list or a page
// needs.
const (
	MaxAliases     = 32
	MaxDescription = 2000
)

// UnmarshalJSON reads a request, refusing fields it does not have (a
// misspelt field silently ignored would serve the wrong thing), takes
// "context_length": "max" for the longest context that fits, and "tp" for
// gpus_per_node: requests written for the reference pipeline use that
// older name.
func (r *Request) UnmarshalJSON(b []byte) error {
	type plain Request
	var in struct {
		plain
		ContextLength json.RawMessage `json:"context_length,omitempty"`
		TP            *int            `json:"tp,omitempty"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			// The field as the request names it, not as this decoder's
			// wrapper does.
			te.Field = strings.TrimPrefix(te.Field, "plain.")
		}
		return err
	}
	*r = Request(in.plain)
	if in.TP != nil {
		if r.GPUsPerNode != 0 && r.GPUsPerNode != *in.TP {
			return invalid("tp is gpus_per_node's older name, and the request gives %d for one and %d for the other: give gpus_per_node alone", *in.TP, r.GPUsPerNode)
		}
		r.GPUsPerNode = *in.TP
	}
	r.ContextLength = 0
	switch c := bytes.TrimSpace(in.ContextLength); {
	case len(c) == 0, string(c) == "null":
	case string(c) == `"max"`:
		r.Longest = true
	default:
		if err := json.Unmarshal(c, &r.ContextLength); err != nil {
			return invalid(`context_length is a number of tokens, or "max" for the longest that fits, not %.40s`, c)
		}
	}
	return nil
}

// ErrInvalid is a request refused for what it says. Every refusal matches it
// with errors.Is, and its message is a sentence to show as it is (the API
// answers 400 with it).
var ErrInvalid = errors.New("the request is not valid")

// invalid is a refused request: the operator's sentence, matching
// ErrInvalid.
func invalid(format string, args ...any) error {
	return operr.Wrap(operr.Invalid, ErrInvalid, format, args...)
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

// normalize checks a request as it arrives and fills what it leaves to
// defaults that do not depend on the model. Each refusal is a sentence; a
// refused request starts nothing and stores nothing.
func normalize(req Request) (Request, error) {
	req.Repo = strings.Trim(strings.TrimSpace(req.Repo), "/")
	if err := hf.CheckRepoID(req.Repo); err != nil {
		return req, invalid("%s is not a repository; it looks like owner/name, or local/<folder> for a folder of the models directory", operr.Quote(req.Repo))
	}
	req.Revision = strings.TrimSpace(req.Revision)
	if req.Revision == "" {
		req.Revision = "main"
	}
	if err := hf.CheckRevision(req.Revision); err != nil {
		msg, _ := operr.Sentence(err)
		return req, invalid("%s", msg)
	}
	if req.Replicas < 0 {
		return req, invalid("replicas cannot be negative: give 0 to load it on demand, or how many to keep running")
	}
	if req.IdleAfter = strings.TrimSpace(req.IdleAfter); req.IdleAfter != "" {
		if _, err := catalog.ParseIdleAfter(req.IdleAfter); err != nil {
			msg, _ := operr.Sentence(err)
			return req, invalid("%s", msg)
		}
	}
	if req.GPUsPerNode < 0 || req.Nodes < 0 || req.CPUCores < 0 || req.MemoryGB < 0 {
		return req, invalid("gpus_per_node, nodes, cpu_cores and memory_gb cannot be negative: leave them out to have them worked out")
	}
	if req.CtxPool < 0 || req.ContextLength < 0 {
		return req, invalid("ctx_pool and context_length cannot be negative: leave them out to have them worked out")
	}
	// Every number is bounded before anything computes with it: far above
	// any real use, far below what overflows or allocates the machine.
	for _, b := range []struct {
		name        string
		value, most int
	}{
		{"replicas", req.Replicas, maxReplicas},
		{"ctx_pool", req.CtxPool, plan.MaxContext},
		{"context_length", req.ContextLength, plan.MaxContext},
		{"gpus_per_node", req.GPUsPerNode, 64},
		{"nodes", req.Nodes, 1024},
		{"cpu_cores", req.CPUCores, 4096},
		{"memory_gb", req.MemoryGB, 1 << 20},
	} {
		if b.value > b.most {
			return req, invalid("%s is at most %d, not %d", b.name, b.most, b.value)
		}
	}
	// So is every text, which the job keeps and every answer about it
	// shows: a megabyte of quant or description was stored and sent back
	// whole with the job.
	for _, b := range []struct {
		name, value string
		most        int
	}{
		{"quant", req.Quant, 64},
		{"file", req.File, hf.MaxPathLen},
		{"projector", req.Projector, hf.MaxPathLen},
		{"description", req.Description, MaxDescription},
	} {
		if len(b.value) > b.most {
			return req, invalid("%s is at most %d bytes, not %d: %s", b.name, b.most, len(b.value), operr.Quote(b.value))
		}
	}
	if len(req.Aliases) > MaxAliases {
		return req, invalid("a model has at most %d aliases, not %d: list the names clients use", MaxAliases, len(req.Aliases))
	}
	if slots := catalog.SizeForContext(req.CtxPool, req.ContextLength).Slots; req.ContextLength > 0 && slots > plan.MaxSlots {
		return req, invalid("a pool of %d tokens in slots of %d is %d slots; an engine serves at most %d at once: give a larger context_length",
			req.CtxPool, req.ContextLength, slots, plan.MaxSlots)
	}
	if req.GPUClass != "" {
		if _, known := plan.LookupClass(req.GPUClass); !known {
			return req, invalid("the GPU class %s is not one the planner knows: use one of %s", operr.Quote(req.GPUClass), strings.Join(plan.Classes(), ", "))
		}
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
		return req, invalid("the format is gguf or safetensors, not %s", operr.Quote(req.Format))
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
		return req, invalid("the engine is llamacpp or vllm, not %s", operr.Quote(req.Engine))
	}
	if req.CPU && req.GPUClass != "" {
		return req, invalid("it runs on the CPU or on %s cards, not both: drop cpu or gpu_class", req.GPUClass)
	}
	if req.GuardFormat != "" && !catalog.KnownGuardFormat(req.GuardFormat) {
		return req, invalid("the guard format is one of %s, not %s", strings.Join(catalog.GuardFormats(), ", "), operr.Quote(req.GuardFormat))
	}
	switch req.Class {
	case "", catalog.ClassCritical, catalog.ClassStandard, catalog.ClassOpportunistic:
	default:
		return req, invalid("the class is critical, standard or opportunistic, not %s", operr.Quote(req.Class))
	}
	if req.GuardFormat != "" && req.Replicas == 0 {
		return req, invalid("a judge model must always run: give it 1 or more replicas, not 0 (on demand)")
	}
	if req.Longest && req.sized() {
		return req, invalid("the longest context that fits, or the context given: not both; drop ctx_pool, or give context_length a number")
	}
	if req.CanaryOf != "" && (req.Share <= 0 || req.Share > 1 || req.Replicas < 1) {
		return req, invalid("a canary of %s takes a share of its requests above 0 and at most 1, not %v, on at least one replica", req.CanaryOf, req.Share)
	}
	if pool, ctx := req.CtxPool, req.ContextLength; pool > 0 && ctx > pool {
		return req, invalid("a request of %d tokens cannot fit a pool of %d: give ctx_pool at least context_length", ctx, pool)
	}
	// The names, aliases and environment as the catalog will judge them,
	// now rather than after a download of hours.
	if err := catalogEntry(req, or(req.Name, hf.ModelName(req.Repo))).Validate(); err != nil {
		return req, operr.Wrap(operr.Invalid, ErrInvalid, "%s", err.Error())
	}
	return req, nil
}

// catalogEntry is the part of a catalog entry the request alone decides.
func catalogEntry(req Request, name string) catalog.Model {
	m := catalog.Model{
		Name: name, Aliases: req.Aliases, Description: req.Description, RoutingProfile: "chat",
		Class:        req.Class,
		Scaling:      catalog.Scaling{Min: req.Replicas, Max: max(req.Replicas, 1), IdleAfter: req.idleAfter()},
		Capabilities: catalog.Capabilities{Vision: req.Projector != "", Tools: req.Tools, Embeddings: req.Embeddings},
		// Placeholders, for Validate; the check and the plan replace them.
		ContextLength: req.Size().Context(),
		Profiles:      []catalog.Profile{{Name: "request", Env: req.Env}},
	}
	if req.GuardFormat != "" {
		m.Role, m.Guard, m.RoutingProfile = catalog.RoleGuard, &catalog.GuardModel{Format: req.GuardFormat}, ""
	}
	if req.CanaryOf != "" {
		m.Canary = &catalog.Canary{Of: req.CanaryOf}
	}
	return m
}

// idleAfter is the request's idle time for the catalog: zero (the
// fleet's default) when it leaves it out. normalize has refused any the
// catalog would not take.
func (r Request) idleAfter() time.Duration {
	if r.IdleAfter == "" {
		return 0
	}
	d, _ := catalog.ParseIdleAfter(r.IdleAfter)
	return d
}

// sized is whether the caller said how large the pool or a request's context
// is, which the check step then leaves alone.
// memoryBytes is what a replica on CPUs reserves (MemoryGB, a request's
// GiB) in bytes, as the plan and the fleets count it; 0 when not asked.
func (r Request) memoryBytes() int64 { return plan.Bytes(float64(r.MemoryGB)) }

func (r Request) sized() bool { return r.CtxPool > 0 || r.ContextLength > 0 }

// Size is the serving size the request asks for, as plan.Size takes what
// it names: its ctx_pool shared by requests of its context_length, the
// default filled in for what it leaves out.
func (r Request) Size() catalog.Size { return r.ask().Shape() }

// ask is the sizing the request asks of plan.Size.
func (r Request) ask() plan.Ask {
	return plan.Ask{CtxPool: r.CtxPool, ContextLength: r.ContextLength, Longest: r.Longest, Embeddings: r.Embeddings, Judge: r.GuardFormat != ""}
}

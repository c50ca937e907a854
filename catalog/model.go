// Package catalog is the list of models modelserve serves: for each, the
// names it answers to, how it runs (its profiles: engine, arguments,
// hardware), how far it scales, what it can do and where its weights came
// from.
//
// A catalog entry used to be written by hand, and its mistakes — an alias
// another model already had, a class or guard format nobody recognised, an
// environment variable that changed more than tuning — surfaced only when a
// replica failed to start or a request reached the wrong model. Here an
// entry is checked whole before it is written, refused with a sentence that
// says what to change, and written in one transaction, so the catalog never
// holds half of one.
package catalog

import (
	"errors"
	"modelserve/internal/hf"
	"modelserve/internal/operr"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Model is one entry of the catalog. The API serves it as it is.
type Model struct {
	// Name is what requests ask for; Aliases are other names that reach it.
	Name        string   `json:"name"`
	Aliases     []string `json:"aliases,omitempty"`
	Description string   `json:"description,omitempty"`
	// Source is where nodes fetch the weights from: the mirror's URL, or a
	// repository an engine fetches by itself.
	Source string `json:"source,omitempty"`
	// Weights are the repository paths of the files the engine loads, the
	// one it opens first (a split model's first shard) first; Projector is
	// a vision model's projector, loaded beside them. Set by the job that
	// served it: nothing guesses them from file names.
	Weights   []string `json:"weights,omitempty"`
	Projector string   `json:"projector,omitempty"`
	// RoutingProfile is the kind of traffic it serves ("chat"); a judge
	// has none.
	RoutingProfile string `json:"routing_profile,omitempty"`
	// ContextLength is the most tokens one request may use; MaxOutput the
	// longest answer allowed.
	ContextLength int `json:"context_length"`
	MaxOutput     int `json:"max_output,omitempty"`
	// Profiles are the ways it can run, the highest priority preferred.
	Profiles     []Profile    `json:"profiles"`
	Scaling      Scaling      `json:"scaling"`
	Capabilities Capabilities `json:"capabilities"`
	// Origin is the registry repository and revision the weights are
	// from; nil for a model added without one.
	Origin *Origin `json:"origin,omitempty"`
	// Role is empty for a model that serves clients, RoleGuard for a judge
	// of the guardrails, which then has a Guard saying how it answers.
	Role  string      `json:"role,omitempty"`
	Guard *GuardModel `json:"guard,omitempty"`
	// Canary is set on the entry of a new version of another model, run
	// beside it while it is judged; its name is CanaryName's.
	Canary *Canary `json:"canary,omitempty"`
	// Class is what it may take from others, and they from it, when there
	// is not room for both; empty means ClassStandard.
	Class string `json:"class,omitempty"`
	// AddedBy and AddedAt are who put it in the catalog and when; the
	// store sets them.
	AddedBy string    `json:"added_by,omitempty"`
	AddedAt time.Time `json:"added_at,omitzero"`
}

// Profile is one way a model runs, said once: the engine, the context it
// holds and how that is shared, the hardware and the memory of each part
// of it. The job's check step sizes it (plan.Size) and the catalog keeps
// it; both fleets place by it and write the engine's command line from it
// at their edge (fleet.EngineArgs), and the pages say it in words. Nothing
// reads it back out of engine arguments.
type Profile struct {
	Name   string `json:"name"`
	Engine string `json:"engine"`
	// Size is the tokens the engine holds (llama.cpp's --ctx-size) and
	// the requests that share them; Context is what each may use. Its
	// JSON is the profile's own "pool" and "slots".
	Size
	// Embeddings serves /v1/embeddings rather than chat; Judge is a guard
	// model, judging prompts for the guardrails.
	Embeddings bool `json:"embeddings,omitempty"`
	Judge      bool `json:"judge,omitempty"`
	// GPUClass and GPUsPerNode are the cards on each node; empty runs on
	// the CPU. Nodes is how many nodes one replica spans (0 or 1: one).
	GPUClass    string `json:"gpu_class,omitempty"`
	GPUsPerNode int    `json:"gpus_per_node,omitempty"`
	Nodes       int    `json:"nodes,omitempty"`
	// TP and PP are tensor and pipeline parallelism, for engines that
	// split a model across cards and nodes.
	TP int `json:"tp,omitempty"`
	PP int `json:"pp,omitempty"`
	// CardBytes is what a replica holds on each of its cards, and
	// RAMBytes what it holds of a node's RAM (all of it, on the CPU; on
	// cards the engine's host share beside them, its prompt cache
	// included): exactly what the check step sized the engine for, so a
	// replica the job placed in free memory is placed there again. The
	// fleets read RAM through HostBytes. CPUCores is what it computes on
	// (0: the engine's default).
	CardBytes int64 `json:"card_bytes,omitempty"`
	RAMBytes  int64 `json:"ram_bytes,omitempty"`
	CPUCores  int   `json:"cpu_cores,omitempty"`
	// PromptCacheBytes is the most llama.cpp's prompt cache may hold of a
	// node's RAM (its --cache-ram), part of RAMBytes; 0 keeps
	// none, as for a judge or a profile written before it was sized.
	PromptCacheBytes int64 `json:"prompt_cache_bytes,omitempty"`
	// Env is set in the engine's environment: the named engine settings
	// only, each with a value it takes (engine_env.go).
	Env map[string]string `json:"env,omitempty"`
	// Priority orders the profiles, highest first; Weight shares traffic
	// between replicas of different profiles.
	Priority int `json:"priority,omitempty"`
	Weight   int `json:"weight,omitempty"`
	// StartupTimeout is how long a replica may take to become healthy;
	// zero is the fleet's default.
	StartupTimeout time.Duration `json:"startup_timeout,omitempty"`
}

// Cards is how many cards a replica takes on each node: none on the CPU.
func (p Profile) Cards() int {
	if p.GPUClass == "" {
		return 0
	}
	return max(p.GPUsPerNode, 1)
}

// Bytes is all the memory a replica holds, on its cards and in RAM: what
// a page says it needs.
func (p Profile) Bytes() int64 {
	return p.CardBytes*int64(p.Cards()) + p.HostBytes()
}

// cardHostBefore is what a replica on cards is taken to hold of its
// node's RAM beside its prompt cache when its profile was written before
// the plan said (RAMBytes 0), as the fleets took it then: the engine,
// the cards' runtime and its pinned buffers, and the token embeddings
// llama.cpp keeps in RAM (about 1 GiB for an 8B model at 16384 tokens).
// vLLM's profiles, which the plan sizes by their cards alone, are taken
// so too.
const cardHostBefore = 1 << 30

// HostBytes is what a replica of p holds of a node's RAM, which both
// fleets place it by and a pod requests: RAMBytes, or for a profile on
// cards that does not say, cardHostBefore and its prompt cache.
func (p Profile) HostBytes() int64 {
	if p.GPUClass == "" || p.RAMBytes > 0 {
		return p.RAMBytes
	}
	return cardHostBefore + p.PromptCacheBytes
}

// Scaling is how many replicas run: Min always (0 loads it on demand, when
// first asked for), up to Max.
type Scaling struct {
	Min int `json:"min"`
	Max int `json:"max"`
	// IdleAfter is how long replicas started on demand (above Min) keep
	// running with no request; zero is the fleet's default (15 minutes).
	IdleAfter time.Duration `json:"idle_after,omitempty"`
}

// UpTo is the most replicas the fleets run: Max, but never fewer than Min,
// and a model on demand with no Max gets one when asked for. Pages and
// forms say this figure, so they say what the fleets do.
func (s Scaling) UpTo() int { return max(s.Max, s.Min, 1) }

// Capabilities are what clients may ask of the model beyond text.
type Capabilities struct {
	Vision     bool `json:"vision,omitempty"`
	Tools      bool `json:"tools,omitempty"`
	Embeddings bool `json:"embeddings,omitempty"`
}

// Origin is where the weights came from, so an update can tell whether the
// repository has moved on.
type Origin struct {
	Repo string `json:"repo"`
	// Revision is the commit the files were fetched at.
	Revision string `json:"revision"`
	// Ref is the revision the operator asked for (a branch such as main, a
	// tag or a commit), and RefKind what the registry said it was when the
	// model was served: hf.RefBranch, RefTag, RefCommit or RefOther. Only
	// a branch moves on by itself, so only a model served from one is
	// watched for new weights. Both are empty for an entry made before
	// modelserve recorded them.
	Ref     string       `json:"ref,omitempty"`
	RefKind string       `json:"ref_kind,omitempty"`
	Files   []OriginFile `json:"files,omitempty"`
}

// OriginFile is one file of the repository the model runs from.
type OriginFile struct {
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
}

// GuardModel is how a judge answers.
type GuardModel struct {
	Format string `json:"format"`
}

// The classes a model can be in.
const (
	ClassCritical      = "critical"
	ClassStandard      = "standard"
	ClassOpportunistic = "opportunistic"
)

// RoleGuard is the role of a judge model for the guardrails.
const RoleGuard = "guard"

// The formats a judge answers in.
const (
	GuardLlamaGuard3 = "llamaguard3"
	GuardQwen3Guard  = "qwen3guard"
	GuardShieldGemma = "shieldgemma"
	GuardJSON        = "json"
)

// GuardFormats returns the formats a judge may answer in.
func GuardFormats() []string {
	return []string{GuardLlamaGuard3, GuardQwen3Guard, GuardShieldGemma, GuardJSON}
}

// KnownGuardFormat reports whether f is one of GuardFormats.
func KnownGuardFormat(f string) bool { return slices.Contains(GuardFormats(), f) }

// ClassOrDefault is the model's class, else its role's default.
func (m Model) ClassOrDefault() string {
	if m.Class == "" {
		return DefaultClass(m.Role)
	}
	return m.Class
}

// DefaultClass is the class a model of role gets when none is given: a
// judge is critical, since every guarded request waits for its verdict and
// evicting it for a chat model would stall them all; anything else is
// standard.
func DefaultClass(role string) string {
	if role == RoleGuard {
		return ClassCritical
	}
	return ClassStandard
}

var (
	// ErrNotFound is a model the catalog does not have.
	ErrNotFound = errors.New("no such model in the catalog")
	// ErrExists is a name the catalog already has, refused by AddNew.
	ErrExists = errors.New("the model is already in the catalog")
	// ErrInvalid is an entry refused for what it says; its message is a
	// sentence to show the operator as it is.
	ErrInvalid = errors.New("the catalog entry is not valid")
)

// invalid is an entry refused for what it says: the operator's sentence,
// matching ErrInvalid.
func invalid(format string, args ...any) error {
	return operr.Wrap(operr.Invalid, ErrInvalid, format, args...)
}

// maxNameLen keeps names short enough for a URL path, a log line and a
// console column.
const maxNameLen = 64

// validName is what a name or alias may be: safe in a URL path and a
// file name, with one spelling per model (no upper case).
var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

const nameRule = "use lowercase letters, digits, '.', '_' and '-', starting with a letter or digit, at most 64 characters"

func nameOK(s string) bool { return len(s) <= maxNameLen && validName.MatchString(s) }

// Canary is what makes an entry a new version of another model, served
// beside it while it is judged: the gateway sends it Share (0 to 1) of the
// requests that name Of. Its replicas are the fleet's as any model's; no
// client names it, nor lists it.
type Canary struct {
	Of    string  `json:"of"`
	Share float64 `json:"share"`
}

// InPlace is whether m, a version of another model on trial, runs in
// place of that model's replica rather than beside it: its entry keeps no
// replica of its own, the model's entry having taken its version while it
// is judged.
func (m Model) InPlace() bool { return m.Canary != nil && m.Scaling.Min == 0 }

// CanaryName is the name of the entry running model's version at commit
// beside it: model@<the commit's first seven hex digits>. No model a
// person names can have it ('@' is not in their names), and it says which
// version it is wherever it shows (the fleet page, the engine's alias).
func CanaryName(model, commit string) string { return model + "@" + hf.Short(commit) }

// canaryName is how a canary's name is made: of, '@' and 7 hex digits.
var canaryName = regexp.MustCompile(`^([a-z0-9][a-z0-9._-]*)@[0-9a-f]{7}$`)

// Validate checks what can be checked of the model on its own; the store
// checks, as it adds it, that its names are not another model's. Each
// refusal is a sentence naming what is wrong and what to do, and matches
// ErrInvalid.
func (m Model) Validate() error {
	if m.Name == "" {
		return invalid("the model has no name: give it one (%s)", nameRule)
	}
	if m.Canary != nil {
		if err := m.validCanary(); err != nil {
			return err
		}
	} else if !nameOK(m.Name) {
		return invalid("the model name %s is not allowed: %s", operr.Quote(m.Name), nameRule)
	}
	seen := map[string]bool{}
	for _, a := range m.Aliases {
		if !nameOK(a) {
			return invalid("the alias %s of %s is not allowed: %s", operr.Quote(a), m.Name, nameRule)
		}
		if a == m.Name {
			return invalid("%s lists its own name %q as an alias: drop it, the name already reaches it", m.Name, a)
		}
		if seen[a] {
			return invalid("%s lists the alias %q twice: list it once", m.Name, a)
		}
		seen[a] = true
	}
	switch m.Class {
	case "", ClassCritical, ClassStandard, ClassOpportunistic:
	default:
		return invalid("the class of %s is critical, standard or opportunistic (empty means standard), not %s", m.Name, operr.Quote(m.Class))
	}
	format := ""
	if m.Guard != nil {
		format = m.Guard.Format
	}
	switch m.Role {
	case "":
		if format != "" {
			return invalid("%s has the guard format %s but not the role guard: set its role to guard, or drop the format", m.Name, operr.Quote(format))
		}
	case RoleGuard:
		if format == "" {
			return invalid("%s has the role guard but no guard format: give it one of %s", m.Name, strings.Join(GuardFormats(), ", "))
		}
		if !KnownGuardFormat(format) {
			return invalid("the guard format of %s is one of %s, not %s", m.Name, strings.Join(GuardFormats(), ", "), operr.Quote(format))
		}
	default:
		return invalid("the role of %s is empty (it serves clients) or guard (it judges for the guardrails), not %s", m.Name, operr.Quote(m.Role))
	}
	if m.ContextLength <= 0 {
		return invalid("the context length of %s is %d: give it the most tokens one request may use, more than 0", m.Name, m.ContextLength)
	}
	if m.Scaling.Min < 0 {
		return invalid("%s is to keep %d replicas: keep 0 (loaded when first asked for) or more", m.Name, m.Scaling.Min)
	}
	if m.Scaling.Max < m.Scaling.Min {
		return invalid("%s may scale to %d replicas, fewer than the %d it keeps: raise its maximum to at least its minimum", m.Name, m.Scaling.Max, m.Scaling.Min)
	}
	if len(m.Profiles) == 0 {
		return invalid("%s has no profile: give it at least one, saying which engine runs it and on what hardware", m.Name)
	}
	names := map[string]bool{}
	for i, p := range m.Profiles {
		if p.Name == "" {
			return invalid("profile %d of %s has no name: name each profile (cpu, gpu-1xa100, ...)", i+1, m.Name)
		}
		if names[p.Name] {
			return invalid("%s has two profiles named %s: give each its own name", m.Name, operr.Quote(p.Name))
		}
		names[p.Name] = true
		if err := p.Size.Check(); err != nil {
			return invalid("profile %s of %s: %s", p.Name, m.Name, err.Error())
		}
		keys := make([]string, 0, len(p.Env))
		for k := range p.Env {
			keys = append(keys, k)
		}
		slices.Sort(keys) // the same refusal every time for the same entry
		for _, k := range keys {
			if why := checkSetting(k, p.Env[k]); why != "" {
				return invalid("profile %s of %s: %s", p.Name, m.Name, why)
			}
		}
	}
	return nil
}

// validCanary checks a canary entry: its name is its model's with the
// commit's, it takes a share from 0 to 1, and nobody names it but by its
// name.
func (m Model) validCanary() error {
	c := m.Canary
	match := canaryName.FindStringSubmatch(m.Name)
	switch {
	case !nameOK(c.Of):
		return invalid("the canary %s is of the model %s, which is not a model's name: %s", operr.Quote(m.Name), operr.Quote(c.Of), nameRule)
	case match == nil || match[1] != c.Of || len(m.Name) > maxNameLen+8:
		return invalid("a canary of %s is named %s@ and the first 7 hex digits of its commit, not %s", c.Of, c.Of, operr.Quote(m.Name))
	case c.Share < 0 || c.Share > 1 || c.Share != c.Share:
		return invalid("the canary %s takes a share of %s's requests from 0 to 1, not %v", m.Name, c.Of, c.Share)
	case len(m.Aliases) > 0:
		return invalid("the canary %s has aliases: a canary is reached through %s, by its share, not by names of its own", m.Name, c.Of)
	}
	return nil
}

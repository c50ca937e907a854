package catalog

import (
	"fmt"

	"modelserve/internal/words"
)

// Size is a serving size: the Pool of tokens an engine holds (llama.cpp's
// --ctx-size, vLLM's whole KV cache), shared by Slots requests at once.
// The request, the plan, the profile, the fleet's start history and the
// engine's load all say a size with it, whatever their JSON or columns
// call its parts: "context" meant the pool in some of them and one slot's
// share in others, and the pool was divided by its slots in nine places.
//
// The zero Size leaves the pool to the engine: only for a profile nobody
// sized.
type Size struct {
	Pool  int `json:"pool,omitempty"`
	Slots int `json:"slots,omitempty"`
}

// The most a size holds: no model is trained for more than MaxContext
// tokens a request, and no engine serves more than MaxSlots requests at
// once. Bounded here, whatever the callers checked, so that no request's
// figures reach an estimate's arithmetic unbounded.
const (
	MaxContext = 1 << 24
	MaxSlots   = 256
)

// SizeForSlots is slots requests of ctx tokens each, the pool they share
// being ctx × slots.
func SizeForSlots(slots, ctx int) Size {
	return Size{Pool: ctx * slots, Slots: slots}
}

// SizeForContext is a pool of tokens shared by requests of ctx tokens
// each: as many slots as it holds, at least one.
func SizeForContext(pool, ctx int) Size {
	if pool <= 0 {
		return Size{}
	}
	return Size{Pool: pool, Slots: max(1, pool/max(ctx, 1))}
}

// Context is the tokens one request may use: its slot's share of the
// pool. This is the one place a pool is divided by its slots.
func (s Size) Context() int {
	if s.Pool <= 0 {
		return 0
	}
	return s.Pool / max(s.Slots, 1)
}

// Sized says the size names a pool; the zero Size leaves it to the
// engine.
func (s Size) Sized() bool { return s.Pool > 0 }

// Check refuses a size no engine is given: negative figures, more slots
// than MaxSlots, a slot longer than MaxContext, or more slots than tokens.
func (s Size) Check() error {
	switch {
	case s.Pool < 0 || s.Slots < 0:
		return invalid("a pool of %d tokens in %d slots cannot be negative: give a pool and slots of at least 1", s.Pool, s.Slots)
	case s.Slots > MaxSlots:
		return invalid("%d slots is more than an engine serves at once (%d): give fewer slots or a longer context", s.Slots, MaxSlots)
	case s.Context() > MaxContext:
		return invalid("%d tokens a slot is more than any model is trained for (%d): give a smaller pool or more slots", s.Context(), MaxContext)
	case s.Pool > 0 && s.Slots > s.Pool:
		return invalid("%d slots of a %d-token pool leave a slot no token: give fewer slots", s.Slots, s.Pool)
	}
	return nil
}

// Words is the size in a sentence: "8192 tokens in 4 slots of 2048", or
// "4096 tokens in one slot".
func (s Size) Words() string {
	if !s.Sized() {
		return "the engine's own context"
	}
	if s.Slots <= 1 {
		return fmt.Sprintf("%d tokens in one slot", s.Pool)
	}
	return fmt.Sprintf("%d tokens in %d %s of %d", s.Pool, s.Slots, words.Plural(s.Slots, "slot", "slots"), s.Context())
}

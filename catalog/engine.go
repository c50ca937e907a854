package catalog

import (
	"slices"
	"strconv"
)

// Sizing is what llama.cpp's arguments are worked out from.
type Sizing struct {
	// CtxPool is the engine's whole context (--ctx-size), shared by its
	// slots; ContextLength is what the catalog promises one request.
	CtxPool       int
	ContextLength int
	// Embeddings serves /v1/embeddings rather than chat.
	Embeddings bool
	// Judge is a guard model, judging prompts for the guardrails.
	Judge bool
}

// LlamaArgs are llama-server's arguments for s, as the check step sized it
// (plan.Size). A zero pool leaves the context to the engine, which takes
// the trained one: only for a profile nobody sized.
//
// The pool and the slots are sized together: llama.cpp divides --ctx-size
// among --parallel slots, so there are as many slots as the pool holds
// requests of the promised context. Left to its default of four slots, a
// 32768 pool became slots of 8192, and requests the catalog said would fit
// were refused by the engine.
func LlamaArgs(s Sizing) []string {
	pool, ctx := s.CtxPool, s.ContextLength
	var args []string
	if pool > 0 {
		ctx = min(max(ctx, 1), pool)
		args = []string{"--ctx-size", strconv.Itoa(pool), "--parallel", strconv.Itoa(max(1, pool/ctx))}
	}
	if s.Embeddings {
		// A passage is embedded in a single batch, so the batch must hold a
		// whole slot: at the default of 512, a 516-token passage was refused.
		args = append([]string{"--embedding"}, args...)
		if ctx > 0 {
			n := strconv.Itoa(ctx)
			args = append(args, "--batch-size", n, "--ubatch-size", n)
		}
	}
	if s.Judge {
		// No prompt cache for a judge: each prompt it sees is a new text
		// that will not come again, and the default cache (up to 8 GB) only
		// grows, by gigabytes over a day.
		args = append(args, "--cache-ram", "0")
	}
	return args
}

// MaxOutput is the longest answer the catalog allows for a context length: a
// quarter of it, kept within 1024..8192. A flat 1024 cut agents off in the
// middle of a file they were writing; more than a quarter leaves too little
// of the context for the prompt.
func MaxOutput(contextLength int) int {
	return min(8192, max(1024, contextLength/4))
}

// SuggestCores is the CPU cores a replica computes on when nobody said, given
// the cores of each node it fits on: half of the smallest, so it fits
// whichever of them it lands on and leaves the node room for the system and
// a neighbour. At least 1; with no nodes it is 0, the engine's default.
func SuggestCores(nodeCPUs []int) int {
	if len(nodeCPUs) == 0 {
		return 0
	}
	return max(1, slices.Min(nodeCPUs)/2)
}

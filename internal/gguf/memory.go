package gguf

import (
	"errors"
	"fmt"
	"math"
	"sync"

	parser "github.com/gpustack/gguf-parser-go"
)

// The memory llama.cpp's process needs beyond what the model's buffers take
// (its code, the backends' own allocations), as gguf-parser-go's users pass
// it to the estimate's summary: 150 MiB of RAM, 250 MiB on each card.
const (
	ramFootprint  = 150 << 20
	vramFootprint = 250 << 20
)

// poolStep is the grain of PoolThatFits' answers: llama.cpp pads its
// context to 256 tokens, so finer answers mean nothing.
const poolStep = 256

// maxPool bounds PoolThatFits' search: 4M tokens, beyond any model's use.
const maxPool = 1 << 22

var errNoShape = errors.New("the header gives no shape")

// KVBytesPerToken is the size of one token's keys and values in every layer,
// with llama.cpp's default f16 cache: blocks × KV heads × (key + value head
// size) × 2 bytes, which is 2 × blocks × KV heads × head size × 2 when keys
// and values are the same size. Llama-3.1-8B: 128 KiB. Zero when the header
// gives no shape.
func (h Header) KVBytesPerToken() int64 {
	if h.BlockCount <= 0 || h.HeadCount <= 0 {
		return 0
	}
	k, v := h.KeyLength, h.ValueLength
	if k <= 0 {
		k = h.EmbeddingLength / h.HeadCount
	}
	if v <= 0 {
		v = h.EmbeddingLength / h.HeadCount
	}
	kvHeads := h.HeadCountKV
	if kvHeads <= 0 {
		kvHeads = h.HeadCount
	}
	return int64(h.BlockCount) * int64(kvHeads) * int64(k+v) * 2
}

type estimateKey struct{ ctx, parallel, gpus int }

// memo keeps a header's estimates; copies of the header share it.
type memo struct {
	mu sync.Mutex
	m  map[estimateKey]int64
}

// estimate is gguf-parser-go's figure for llama.cpp running the model with
// a pool of ctxPool tokens in parallel slots: on the CPU when gpus is 0 (the
// RAM it takes, weights included), else fully offloaded to gpus cards split
// evenly (the most any one card takes).
func (h Header) estimate(ctxPool, parallel, gpus int) (int64, error) {
	if !h.Shaped() {
		return 0, errNoShape
	}
	key := estimateKey{max(ctxPool, 1), max(parallel, 1), max(gpus, 0)}
	if h.memo != nil {
		h.memo.mu.Lock()
		b, ok := h.memo.m[key]
		h.memo.mu.Unlock()
		if ok {
			return b, nil
		}
	}
	b, err := h.estimateNow(key.ctx, key.parallel, key.gpus)
	if err == nil && h.memo != nil {
		h.memo.mu.Lock()
		h.memo.m[key] = b
		h.memo.mu.Unlock()
	}
	return b, err
}

func (h Header) estimateNow(ctxPool, parallel, gpus int) (bytes int64, err error) {
	defer func() {
		// The library panics on options it dislikes; a panic here must not
		// take the job down with it.
		if r := recover(); r != nil {
			bytes, err = 0, fmt.Errorf("gguf-parser-go's estimate failed: %v", r)
		}
	}()
	ctx := int32(min(max(ctxPool, 1), math.MaxInt32))
	// llama.cpp caps its batches at the context; the estimate panics when
	// the physical batch is larger than the logical one.
	logical := min(int32(2048), max(ctx, 32))
	physical := min(int32(512), logical)
	opts := []parser.GGUFRunEstimateOption{
		parser.WithLLaMACppContextSize(ctx),
		parser.WithParallelSize(int32(max(parallel, 1))),
		parser.WithLLaMACppLogicalBatchSize(logical),
		parser.WithLLaMACppPhysicalBatchSize(physical),
	}
	if gpus <= 0 {
		opts = append(opts, parser.WithLLaMACppOffloadLayers(0))
	} else if gpus > 1 {
		split := make([]float64, gpus)
		for i := range split {
			split[i] = float64(i+1) / float64(gpus)
		}
		split[gpus-1] = 1
		opts = append(opts, parser.WithTensorSplitFraction(split))
	}
	e := h.file.EstimateLLaMACppRun(opts...)
	// On the CPU the weights are read into RAM (no mmap, so they count);
	// on cards they live on the cards, and RAM is not the limit.
	item := e.Summarize(gpus > 0, ramFootprint, vramFootprint).Items[0]
	if gpus <= 0 {
		return int64(item.RAM.NonUMA), nil
	}
	var most int64
	for _, v := range item.VRAMs {
		most = max(most, int64(v.NonUMA))
	}
	return most, nil
}

// unread is the weights the header did not describe: a shard read on its
// own describes only its part of them.
func (h Header) unread(weights int64) int64 {
	if h.file == nil {
		return 0
	}
	return max(0, weights-int64(h.file.TensorInfos.Bytes()))
}

// MemoryBytes is the memory a replica on the CPU takes: the weights (the
// files' bytes, weights), the KV cache and compute buffers for a pool of
// ctxPool tokens in parallel slots, the engine's own, and a vision projector
// of mmproj bytes beside it. Always pass the --ctx-size the replica starts
// with: llama.cpp's default is the trained context, often far larger. When
// the header gives no shape it is the rough figure from before shapes were
// read: the weights, half again, and 2 GiB.
func (h Header) MemoryBytes(weights int64, ctxPool, parallel int, mmproj int64) int64 {
	ram, err := h.estimate(ctxPool, parallel, 0)
	if err != nil {
		return weights + weights/2 + 2<<30 + mmproj
	}
	return ram + h.unread(weights) + mmproj
}

// PoolThatFits is the largest context pool (--ctx-size, in tokens, a
// multiple of 256 as llama.cpp pads it) whose model, fully offloaded and
// split evenly over gpus cards of cardGB each, fits every card. It is 0 when
// there is no limit to tell (no card size, or a header that gives no shape)
// and -1 when the weights do not fit the cards even with 256 tokens beside
// them.
func (h Header) PoolThatFits(weights int64, cardGB float64, gpus int) int {
	if cardGB <= 0 || !h.Shaped() {
		return 0
	}
	gpus = max(gpus, 1)
	card := int64(cardGB * (1 << 30))
	extra := h.unread(weights) / int64(gpus)
	fits := func(steps int) bool {
		b, err := h.estimate(steps*poolStep, 1, gpus)
		return err == nil && b+extra <= card
	}
	if !fits(1) {
		return -1
	}
	// The KV cache alone bounds the search: every card holds its share.
	hi := maxPool / poolStep
	if kv := h.KVBytesPerToken(); kv > 0 {
		hi = min(hi, int(card*int64(gpus)/kv/poolStep)+1)
	}
	return mostThatFits(1, hi, fits) * poolStep
}

// LongestContextThatFits is the longest context, up to the one the model was
// trained for, whose KV cache and buffers fit in memoryBytes beside the
// weights on the CPU (MemoryBytes with one slot): a multiple of 1024. It is
// 0 when not even 1024 tokens fit, or the header gives no shape.
func (h Header) LongestContextThatFits(memoryBytes, weights int64) int {
	if !h.Shaped() || h.ContextLength < 1024 {
		return 0
	}
	fits := func(k int) bool { return h.MemoryBytes(weights, k*1024, 1, 0) <= memoryBytes }
	// In units of 1024 tokens; none at all is taken to fit.
	return mostThatFits(0, h.ContextLength/1024, fits) * 1024
}

// mostThatFits is the largest k from lo to hi for which fits(k), found by
// bisection: fits(lo) is taken as true, and once fits is false it stays
// false for every larger k. Each fits is a whole estimate, so it is asked
// about log2(hi-lo) times.
func mostThatFits(lo, hi int, fits func(int) bool) int {
	if fits(hi) {
		return hi
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// Pool is llama-server's context: CtxPool tokens (--ctx-size) shared by
// slots of ContextLength tokens each (--parallel is CtxPool/ContextLength).
type Pool struct {
	CtxPool       int
	ContextLength int
}

// Slots is how many requests the pool serves at once.
func (p Pool) Slots() int { return max(1, p.CtxPool/max(p.ContextLength, 1)) }

func gb(b int64) float64 { return float64(b) / (1 << 30) }

// FitPoolToCard shrinks a pool that gpus cards of class (cardGB each) cannot
// hold beside the weights to one they can, and says so in why; it refuses
// weights that do not fit at all. The slots stay as many as asked while each
// keeps 2048 tokens, then become fewer; each slot's context is a multiple of
// 1024. A pool that fits, or a card of unknown size, comes back unchanged
// with an empty why.
func FitPoolToCard(h Header, p Pool, weights int64, class string, cardGB float64, gpus int) (fitted Pool, why string, err error) {
	gpus = max(gpus, 1)
	most := h.PoolThatFits(weights, cardGB, gpus)
	switch {
	case most == 0 || p.CtxPool <= most:
		return p, "", nil
	case most < 0:
		return p, "", fmt.Errorf("its weights (%.1f GB) do not fit %d card(s) of %s with room to run: "+
			"choose a smaller quantisation, or more cards", gb(weights), gpus, class)
	}
	slots := p.Slots()
	for slots > 1 && most/slots < 2048 {
		slots--
	}
	per := most / slots / 1024 * 1024
	if per < 1024 {
		return p, "", fmt.Errorf("its weights (%.1f GB) leave room on %s for a context of %d tokens only", gb(weights), class, most)
	}
	fitted = Pool{CtxPool: per * slots, ContextLength: per}
	noun := "slots"
	if slots == 1 {
		noun = "slot"
	}
	return fitted, fmt.Sprintf("a %d-token pool does not fit %s beside %.1f GB of weights: %d %s of %d tokens instead",
		p.CtxPool, class, gb(weights), slots, noun, per), nil
}

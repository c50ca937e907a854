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

// RAMFootprint is the RAM llama.cpp's process takes before any model: no
// memory smaller than it runs a model.
const RAMFootprint = ramFootprint

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

// usage is an estimate's memory: of the node's RAM, and of the most
// loaded card (0 on the CPU).
type usage struct{ ram, card int64 }

// memo keeps a header's estimates; copies of the header share it.
type memo struct {
	mu sync.Mutex
	m  map[estimateKey]usage
}

// estimate is gguf-parser-go's figure for llama.cpp running the model with
// a pool of ctxPool tokens in parallel slots: on the CPU when gpus is 0 (the
// RAM it takes, weights included), else fully offloaded to gpus cards split
// evenly (the most any one card takes, and what stays in the node's RAM).
func (h Header) estimate(ctxPool, parallel, gpus int) (usage, error) {
	if !h.Shaped() {
		return usage{}, errNoShape
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

func (h Header) estimateNow(ctxPool, parallel, gpus int) (u usage, err error) {
	defer func() {
		// The library panics on options it dislikes; a panic here must not
		// take the job down with it.
		if r := recover(); r != nil {
			u, err = usage{}, fmt.Errorf("gguf-parser-go's estimate failed: %v", r)
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
		// llama-server's --flash-attn defaults to auto, which turns it on
		// wherever the backend has it (the CPU's and CUDA's do). Without
		// it the attention's scratch grows with the context: 8 GiB more
		// for an 8B at 131072 tokens, which the engine never allocates.
		parser.WithFlashAttention(),
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
		return usage{ram: int64(item.RAM.NonUMA)}, nil
	}
	for _, v := range item.VRAMs {
		u.card = max(u.card, int64(v.NonUMA))
	}
	// What stays in RAM with every layer on cards: the engine's own, the
	// tensors llama.cpp never offloads (the token embeddings, read a row
	// a token, and any kept on the CPU), the host's buffers (the logits
	// are read back into RAM whatever the offload) and any KV cache left
	// on the host. The summary drops the tensors as mapped from the file;
	// they are read all the same, and a pod's memory counts the pages it
	// reads. The device's Output weights are the output layer's, counted
	// on the card that holds it.
	host := e.Devices[0]
	u.ram = ramFootprint + int64(host.Footprint+host.Weight.Input+host.Weight.ComputeOverridden+
		host.KVCache.Sum()+host.Computation.Sum())
	return u, nil
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
	u, err := h.estimate(ctxPool, parallel, 0)
	if err != nil {
		return weights + weights/2 + 2<<30 + mmproj
	}
	return u.ram + h.unread(weights) + mmproj
}

// CardBytes is the memory each of gpus cards takes with the model fully
// offloaded and split evenly over them, for a pool of ctxPool tokens in
// parallel slots. When the header gives no shape it is the rough figure
// (weights, half again, and 2 GiB) split over the cards.
func (h Header) CardBytes(weights int64, ctxPool, parallel, gpus int) int64 {
	gpus = max(gpus, 1)
	u, err := h.estimate(ctxPool, parallel, gpus)
	if err != nil {
		return (weights + weights/2 + 2<<30) / int64(gpus)
	}
	return u.card + h.unread(weights)/int64(gpus)
}

// HostBytes is what a replica on gpus cards, as CardBytes sizes it, holds
// of its node's RAM beside them: the engine's own, the tensors llama.cpp
// keeps in RAM with every layer offloaded (the token embeddings) and the
// host's compute buffers; its prompt cache is the caller's to add. When
// the header gives no shape it is the rough figure: the engine's own and
// a twentieth of the weights (an 8B's token embeddings are about that of
// its file), at least 1 GiB.
func (h Header) HostBytes(weights int64, ctxPool, parallel, gpus int) int64 {
	u, err := h.estimate(ctxPool, parallel, max(gpus, 1))
	if err != nil {
		return max(1<<30, ramFootprint+weights/20)
	}
	return u.ram
}

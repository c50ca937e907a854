package plan

import (
	"fmt"

	"modelserve/internal/words"
)

// A replica on cards holds some of its node's RAM beside them (its host
// share): the engine's own process, what it keeps out of its cards, its
// prompt cache. Both fleets place it only on a node whose RAM holds that
// share (fleet.CouldHost), so a layout the plan said fitted could be a
// replica no node would take, its cards idle. The plan asks the same of
// each node with the cards.

// hostRoom is the most RAM a node of the pool with the cards of a layout
// has: in all, of a node with cards cards of the class that each hold
// need, and free now, of one with that many of them free (cardsFree says
// there is one).
func hostRoom(nodes []Node, class string, cards int, need int64) (now, all int64, cardsFree bool) {
	for _, n := range nodes {
		g, ok := n.class(class)
		if !ok || g.MemoryBytes < need {
			continue
		}
		total, free := n.cards(class, need)
		if total >= cards {
			all = max(all, n.RAMBytes)
		}
		if free >= cards {
			now, cardsFree = max(now, n.FreeRAMBytes), true
		}
	}
	return now, all, cardsFree
}

// hostShort says that no node with a layout's cards holds its host
// share: the most one has is all.
func hostShort(host, all int64) string {
	return fmt.Sprintf("a replica holds %s of its node's RAM beside its cards, and the most a node with the cards has is %s",
		words.Size(host), words.Size(all))
}

// hostBusy says that no node with a layout's cards free has its host
// share free now: the most one has is now.
func hostBusy(host, now int64) string {
	return fmt.Sprintf("a replica holds %s of its node's RAM beside its cards, and a node with the cards free has %s free now",
		words.Size(host), words.Size(now))
}

// What vLLM holds of its node's RAM beside its cards: its OpenAI server
// and engine core (Python, torch, the tokenizer), a worker for each card
// (torch and the CUDA runtime, with its pinned buffers), and the
// memory-backed /dev/shm the workers pass activations through (NCCL's
// shared-memory transport), which counts against the pod's memory. The
// host figure of llama.cpp (gguf's HostBytes, or the catalog's 1 GiB for
// a profile that says none) is one C++ process's, which vLLM outgrows
// before it loads a weight.
const (
	vllmHostBaseBytes   = 2 << 30
	vllmWorkerHostBytes = 2 << 30
	// VLLMShmBytesPerCard is the /dev/shm a replica of vLLM has for each
	// card of its node: a container's own is 64 MiB, which a model
	// sliced over cards outgrows at its first batch.
	VLLMShmBytesPerCard = 1 << 30
)

// VLLMHostBytes is what a replica of vLLM on cards cards of a node holds
// of that node's RAM.
func VLLMHostBytes(cards int) int64 {
	return vllmHostBaseBytes + int64(max(cards, 1))*(vllmWorkerHostBytes+VLLMShmBytesPerCard)
}

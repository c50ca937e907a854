package catalog

import (
	"slices"
)

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

// Depth is how many requests are sent at once to an engine of slots
// slots: one waiting in the engine's own queue for each slot, beyond those
// its slots serve. The engine starts a request it holds the moment a slot
// frees, where one held in modelserve would first cross to it; more than
// one per slot would only keep requests from a replica that frees sooner.
// The gateway sends no more than this, and the fleet starts the engine
// with an HTTP thread for each (fleet.EngineArgs): one owner, so the two
// cannot part.
func Depth(slots int) int { return 2 * max(slots, 1) }

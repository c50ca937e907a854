package fleet

import (
	"context"
	"fmt"
	"strings"

	"modelserve/internal/engine"
)

// The cards nvidia-smi reports are the machine's; the ones a replica can
// compute on are the engine build's. A CPU-only llama-server (Debian's,
// without its GPU backend package) would run every model on the CPU while
// the fleet counted its cards as used, so the local node plans only the
// cards the engine itself lists (`llama-server --list-devices`) and says in
// a sentence what it saw and left out.

// engineCards are the cards of the machine the engine at path can use:
// as many of them, in nvidia-smi's order, as it lists devices of its first
// GPU backend (engine.GPUDevices), and a sentence for the operator when that leaves some out
// ("" when none is). Without cards the engine is not asked.
func engineCards(ctx context.Context, path string, cards []Card) ([]Card, string) {
	if len(cards) == 0 {
		return cards, ""
	}
	if path == "" {
		return []Card{}, seenCards(cards) + " seen; no llama-server is installed to run on them: install one or set --llama-server"
	}
	devs, err := engine.ReadDevices(ctx, path)
	if err != nil {
		return []Card{}, seenCards(cards) + " seen, not counted: the engine's own device list could not be read (" + err.Error() +
			"): use a llama-server build that lists its devices, or set --llama-server"
	}
	return usableCards(cards, devs)
}

// usableCards keeps the first of cards the engine's devices cover.
func usableCards(cards []Card, devs []engine.Device) ([]Card, string) {
	listed := engine.GPUDevices(devs)
	if len(listed) == 0 {
		return []Card{}, seenCards(cards) + " seen; the engine build has no GPU backend: install one or set --llama-server"
	}
	if len(listed) >= len(cards) {
		return cards, ""
	}
	names := make([]string, len(listed))
	for i, d := range listed {
		names[i] = d.Name
	}
	return cards[:len(listed)], fmt.Sprintf("%s seen; the engine lists %s only, so %s not counted: "+
		"check the cards' driver, or set --llama-server to a build that uses them",
		seenCards(cards), strings.Join(names, ", "), seenCards(cards[len(listed):]))
}

// seenCards is how many cards of each class there are: "2×L4", "1×L4 and
// 1×T4".
func seenCards(cards []Card) string {
	var parts []string
	for i := 0; i < len(cards); {
		j := i
		for j < len(cards) && cards[j].Class == cards[i].Class {
			j++
		}
		parts = append(parts, fmt.Sprintf("%d×%s", j-i, cards[i].Class))
		i = j
	}
	return strings.Join(parts, " and ")
}

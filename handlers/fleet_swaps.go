package handlers

import (
	"slices"
	"strings"
	"time"

	"modelserve/internal/fleet"
	"modelserve/views"
)

// maxSwaps is how many swaps the fleet page lists: the fleet keeps one a
// model (ModelHealth.LastStop), and a page of them is what an operator
// reads.
const maxSwaps = 10

// swapViews are the fleet's last swaps, newest first: for each model, the
// replica of it last given back for another (LastStop, LastStopFor,
// LastStopAt), and the first engine start of the model it was given back
// for since (starts, newest first): when it became ready and how long it
// took to load. A swap whose model in has not started since is under way.
func swapViews(models []fleet.ModelHealth, starts []fleet.Start, now time.Time) []views.FleetSwap {
	type swap struct {
		vm views.FleetSwap
		at time.Time
	}
	var out []swap
	for _, h := range models {
		if h.LastStop == "" {
			continue
		}
		id, why, ok := strings.Cut(h.LastStop, ": ") // GivenBack.Tell's form
		if !ok {
			id, why = "", h.LastStop
		}
		sw := swap{at: h.LastStopAt, vm: views.FleetSwap{Out: id, OutModel: h.Model, Why: why, In: h.LastStopFor}}
		if sw.vm.In == "" {
			sw.vm.In = "another model"
		}
		// Its first start ready since the stop: starts are newest first.
		for _, st := range starts {
			if st.Model == h.LastStopFor && !st.ReadyAt.IsZero() && !st.ReadyAt.Before(h.LastStopAt) {
				sw.vm.At, sw.vm.AtISO = timeText(st.ReadyAt, now), st.ReadyAt.UTC().Format(time.RFC3339)
				sw.vm.LoadedIn = durationText(st.ReadyAt.Sub(st.Started))
			}
		}
		out = append(out, sw)
	}
	slices.SortStableFunc(out, func(a, b swap) int { return b.at.Compare(a.at) })
	vms := make([]views.FleetSwap, 0, min(len(out), maxSwaps))
	for _, sw := range out[:min(len(out), maxSwaps)] {
		vms = append(vms, sw.vm)
	}
	return vms
}

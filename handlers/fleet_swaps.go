package handlers

import (
	"regexp"
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

// askerOf finds the model a replica was given back for in the fleet's
// sentence (fleet.GiveBackWhy): "given back for chatty, idle for 4 min",
// "stopped to make room for chatty, a critical model".
var askerOf = regexp.MustCompile(`(?:given back for|make room for) ([A-Za-z0-9._-]+)`)

// swapViews are the fleet's last swaps, newest first: for each model, the
// replica of it last given back for another (its LastStop), the model it
// was given back for, and that model's newest engine start among starts
// (newest first), when it became ready and how long it took to load. The
// fleet keeps no time of the stop itself, so a swap whose model in has
// not started since is listed first, as the one under way.
func swapViews(models []fleet.ModelHealth, starts []fleet.Start, now time.Time) []views.FleetSwap {
	type swap struct {
		vm    views.FleetSwap
		ready time.Time
	}
	var out []swap
	for _, h := range models {
		if h.LastStop == "" {
			continue
		}
		id, why, ok := strings.Cut(h.LastStop, ": ")
		if !ok {
			id, why = "", h.LastStop
		}
		sw := swap{vm: views.FleetSwap{Out: id, OutModel: h.Model, Why: why, In: "another model"}}
		if m := askerOf.FindStringSubmatch(why); m != nil {
			sw.vm.In = m[1]
			if i := slices.IndexFunc(starts, func(st fleet.Start) bool { return st.Model == m[1] && !st.ReadyAt.IsZero() }); i >= 0 {
				st := starts[i]
				sw.ready = st.ReadyAt
				sw.vm.At, sw.vm.AtISO = timeText(st.ReadyAt, now), st.ReadyAt.UTC().Format(time.RFC3339)
				sw.vm.LoadedIn = durationText(st.ReadyAt.Sub(st.Started))
			}
		}
		out = append(out, sw)
	}
	slices.SortStableFunc(out, func(a, b swap) int {
		switch {
		case a.ready.IsZero() != b.ready.IsZero():
			if a.ready.IsZero() {
				return -1
			}
			return 1
		}
		return b.ready.Compare(a.ready)
	})
	vms := make([]views.FleetSwap, 0, min(len(out), maxSwaps))
	for _, sw := range out[:min(len(out), maxSwaps)] {
		vms = append(vms, sw.vm)
	}
	return vms
}

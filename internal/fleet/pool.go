package fleet

import (
	"slices"

	"modelserve/internal/plan"
)

// Pool is the fleet's nodes as the planner sees them: the planner's pool,
// so that what the serve page says fits and where the job places a replica
// are decided on the same nodes and the same free memory. Free memory is
// what a new replica can be promised (the kernel's available memory, less
// what replicas still loading were promised, and with what idle replicas
// of models on demand would give back for a model that needs their room:
// swap.go), less the headroom kept free (headroom.go); a card is free while no replica holds it, or an idle one on
// demand does.
func (f *Fleet) Pool() []plan.Node {
	out := []plan.Node{}
	for i, ns := range f.Nodes() {
		_, local := f.nodes[i].(*LocalNode)
		// The planner sizes by what the node may promise: its memory
		// less the headroom (headroom.go).
		ram := ns.RAMBytes - ns.HeadroomBytes
		n := plan.Node{
			Name: ns.Name, Local: local,
			CPUCores: ns.CPUCores, RAMGB: gib(ram), FreeRAMGB: gib(max(min(ns.FreeBytes+ns.ReclaimableBytes, ram), 0)),
			CPUBandwidthGBs: plan.DefaultCPUBandwidthGBs, GPUs: []plan.GPU{}, Note: ns.Note,
		}
		for _, c := range ns.GPUs {
			card := cardRoom(c.MemoryBytes, ns.CardHeadroomBytes)
			j := len(n.GPUs) - 1
			if j < 0 || n.GPUs[j].Class != c.Class {
				g := plan.GPU{Class: c.Class, MemoryGB: gib(card)}
				if cls, ok := plan.LookupClass(c.Class); ok {
					g.BandwidthGBs = cls.BandwidthGBs
				} else {
					g.BandwidthGBs, g.BandwidthEstimated = plan.UnknownCardBandwidthGBs, true
				}
				n.GPUs = append(n.GPUs, g)
				j++
			}
			free := gib(card)
			if c.Replica != "" && !slices.Contains(ns.Reclaimable, c.Replica) {
				free = 0
			}
			n.GPUs[j].Count++
			n.GPUs[j].FreeGB = append(n.GPUs[j].FreeGB, free)
		}
		out = append(out, n)
	}
	return out
}

func gib(b int64) float64 { return float64(b) / (1 << 30) }

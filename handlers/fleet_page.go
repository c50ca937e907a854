package handlers

import (
	"fmt"
	"net/http"

	"modelserve/internal/plan"
	"modelserve/views"
)

// fleetPage shows the pool's nodes and what each has free. Replicas come
// with the fleet, which does not exist yet: the page keeps their place.
func (s *Server) fleetPage(w http.ResponseWriter, r *http.Request, v visit) {
	p := views.FleetPage{Layout: s.layout(v, "fleet", "Fleet")}
	if s.deps.Pool == nil {
		p.NoPool = "No pool of nodes is configured, so there is nothing to show."
	} else {
		for _, n := range s.deps.Pool.Nodes() {
			p.Nodes = append(p.Nodes, nodeView(n))
		}
		if len(p.Nodes) == 0 {
			p.NoPool = "The pool has no nodes: declare them in a nodes file, or let modelserve read this machine."
		}
	}
	s.render(w, r, http.StatusOK, views.FleetPageView(p))
}

func nodeView(n plan.Node) views.Node {
	vm := views.Node{
		Name: n.Name, Local: n.Local, CPU: fmt.Sprintf("%d %s, %.0f GB/s to memory", n.CPUCores, plural(n.CPUCores, "core", "cores"), n.CPUBandwidthGBs),
		RAM: gbText(n.RAMGB), FreeRAM: gbText(n.FreeRAMGB), Note: n.Note,
		Memory: usageBar("RAM", n.RAMGB, n.FreeRAMGB),
	}
	for _, g := range n.GPUs {
		bw := fmt.Sprintf("%.0f GB/s", g.BandwidthGBs)
		if g.BandwidthEstimated {
			bw += " (estimated)"
		}
		ng := views.NodeGPU{Class: g.Class, Count: fmt.Sprint(g.Count), Memory: gbText(g.MemoryGB), Bandwidth: bw}
		for i, free := range g.FreeGB {
			ng.Bars = append(ng.Bars, usageBar(fmt.Sprintf("%s #%d", g.Class, i), g.MemoryGB, free))
		}
		vm.GPUs = append(vm.GPUs, ng)
	}
	return vm
}

// usageBar is memory in use against free.
func usageBar(label string, totalGB, freeGB float64) views.Bar {
	if totalGB <= 0 {
		return views.Bar{Label: label, Text: "not known"}
	}
	freeGB = min(max(freeGB, 0), totalGB)
	used := totalGB - freeGB
	return views.Bar{
		Label: label, Capacity: 100,
		Parts: []views.BarPart{
			{Name: "in use", Key: "used", Share: used * 100 / totalGB, Text: gbText(used)},
			{Name: "free", Key: "free", Share: freeGB * 100 / totalGB, Text: gbText(freeGB)},
		},
		Text: fmt.Sprintf("%s in use, %s free of %s", gbText(used), gbText(freeGB), gbText(totalGB)),
	}
}

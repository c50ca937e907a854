package fleet

import (
	"slices"

	"modelserve/internal/plan"
)

// Room is one node's room, in bytes, as a backend reports it and the
// fleet counts it: the one figure the fleet shows as the node
// (NodeStatus), hands the planner (plan.Node) and places by, on either
// backend. The local backend reports the machine, the Kubernetes one a
// node's allocatable room less what pods other than the fleet's request;
// the replicas' promises and the headroom are the fleet's (Headroom.Room).
// Before it each fleet worked out its own: one added the room idle
// replicas would give back to the free memory, the other took it off
// what was used, and only one kept a headroom.
type Room struct {
	Name     string
	CPUCores int
	// Total is the node's memory; Kept what of it the headroom keeps
	// free for the system and other programs, never promised.
	Total, Kept int64
	// Available is what a new process could have now: the kernel's
	// MemAvailable on a machine, allocatable less what pods request on
	// a cluster node.
	Available int64
	// Promised is what the node's replicas were promised (requested);
	// Free what a new replica can be promised now, the headroom kept.
	Promised, Free int64
	// Reclaimable are the replicas the swap rule would give back for a
	// model that needs their room (swap.go), and ReclaimableBytes the
	// memory they hold.
	Reclaimable      []string
	ReclaimableBytes int64
	// Cards are its GPUs; CardKept what the headroom keeps free of each.
	Cards    []CardRoom
	CardKept int64
	// Replicas are the fleet's replicas on it.
	Replicas []string
	// Note is what the node could not count of its hardware, and why.
	Note  string
	Local bool
}

// CardRoom is one GPU of a node and what holds it.
type CardRoom struct {
	Index int
	Class string
	// Memory is the card's memory, before the headroom (0: not known).
	Memory int64
	// Holder is the replica holding it ("" for none), and Reclaimable
	// whether the swap rule would give that replica back.
	Holder      string
	Reclaimable bool
}

// Room is the room of node name, of capacity c, whose replicas were
// promised promised bytes, outstanding of which they have not taken yet
// (so Available still counts them): the headroom kept off its memory and
// each card's. What a new replica can be promised is the memory less
// what is promised, and no more than is available less what replicas
// still loading will take: MemAvailable alone lags, a replica that has
// just started has taken almost nothing yet.
func (h Headroom) Room(name string, c Capacity, promised, outstanding int64) Room {
	k := h.keep(c)
	r := Room{
		Name: name, CPUCores: c.CPUCores, Total: c.RAMBytes, Kept: c.RAMBytes - k.RAMBytes,
		Available: c.AvailableBytes, Promised: promised, CardKept: h.Card, Note: c.Note,
		Free: max(0, min(k.RAMBytes-promised, k.AvailableBytes-outstanding)),
	}
	for _, g := range c.GPUs {
		r.Cards = append(r.Cards, CardRoom{Index: g.Index, Class: g.Class, Memory: g.MemoryBytes})
	}
	return r
}

// Capacity is what of the node may be promised, were it idle: its
// memory and each card's less the headroom (CouldHost asks it).
func (r Room) Capacity() Capacity {
	c := Capacity{CPUCores: r.CPUCores, RAMBytes: r.Total - r.Kept, AvailableBytes: max(0, r.Available-r.Kept), Note: r.Note}
	for _, g := range r.Cards {
		c.GPUs = append(c.GPUs, Card{Index: g.Index, Class: g.Class, MemoryBytes: cardRoom(g.Memory, r.CardKept)})
	}
	return c
}

// Status is the node as the API shows it.
func (r Room) Status() NodeStatus {
	ns := NodeStatus{
		Name: r.Name, CPUCores: r.CPUCores, RAMBytes: r.Total, AvailableBytes: r.Available,
		FreeBytes: r.Free, PromisedBytes: r.Promised, HeadroomBytes: r.Kept, CardHeadroomBytes: r.CardKept,
		Note: r.Note, Replicas: slices.Clone(r.Replicas), Reclaimable: slices.Clone(r.Reclaimable), ReclaimableBytes: r.ReclaimableBytes,
	}
	if ns.Replicas == nil {
		ns.Replicas = []string{}
	}
	for _, g := range r.Cards {
		ns.GPUs = append(ns.GPUs, GPUStatus{Index: g.Index, Class: g.Class, MemoryBytes: g.Memory, Replica: g.Holder})
	}
	return ns
}

// PlanNode is the node as the planner sees it, so that what the serve
// page says fits and where a replica is placed are decided on the same
// figures: its memory less the headroom, free what a new replica can be
// promised with what the replicas the swap rule would give back for a
// model that needs their room hold; a card is free while no replica
// holds it, or one that would be given back does.
func (r Room) PlanNode() plan.Node {
	ram := r.Total - r.Kept
	n := plan.Node{
		Name: r.Name, Local: r.Local, CPUCores: r.CPUCores,
		RAMBytes: ram, FreeRAMBytes: max(min(r.Free+r.ReclaimableBytes, ram), 0),
		CPUBandwidthGBs: plan.DefaultCPUBandwidthGBs, GPUs: []plan.GPU{}, Note: r.Note,
	}
	for _, c := range r.Cards {
		card := cardRoom(c.Memory, r.CardKept)
		j := len(n.GPUs) - 1
		if j < 0 || n.GPUs[j].Class != c.Class {
			g := plan.GPU{Class: c.Class, MemoryBytes: card}
			if cls, ok := plan.LookupClass(c.Class); ok {
				g.BandwidthGBs = cls.BandwidthGBs
			} else {
				g.BandwidthGBs, g.BandwidthEstimated = plan.UnknownCardBandwidthGBs, true
			}
			n.GPUs = append(n.GPUs, g)
			j++
		}
		free := card
		if c.Holder != "" && !c.Reclaimable {
			free = 0
		}
		n.GPUs[j].Count++
		n.GPUs[j].FreeBytes = append(n.GPUs[j].FreeBytes, free)
	}
	return n
}

package kubefleet

import (
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/plan"
)

// node is one node's room as the scheduler counts it: allocatable less
// what the pods bound to it request, with the fleet's headroom kept off
// its memory (mem) as the local fleet keeps it off a machine's.
type node struct {
	name                      string
	cpu, mem, gpus            int64 // allocatable, mem less the headroom
	cpuUsed, memUsed, gpuUsed int64 // requested
	product                   string
	class                     string
	// room is the node's room as the fleet shows it (fleet.Room).
	room fleet.Room
	ours []string
}

// room reads every node and pod from the caches.
func (f *cluster) room() []node {
	if !f.up.Load() {
		return nil
	}
	ns, _ := f.nodes.List(labels.Everything())
	pods, _ := f.pods.List(labels.Everything())
	byName := map[string]*node{}
	out := make([]node, 0, len(ns))
	cards := map[string]int64{}
	for _, n := range ns {
		a := n.Status.Allocatable
		gpus := a[f.opts.GPUResource]
		product := n.Labels[f.opts.GPUProductLabel]
		out = append(out, node{
			name: n.Name, cpu: a.Cpu().Value(), mem: a.Memory().Value(), gpus: gpus.Value(),
			product: product, class: classOf(product),
		})
		cards[n.Name] = cardBytes(n, product)
	}
	for i := range out {
		byName[out[i].name] = &out[i]
	}
	for _, p := range pods {
		n := byName[p.Spec.NodeName]
		if n == nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		cpu, mem, gpu := requests(p, f.opts.GPUResource)
		n.cpuUsed += cpu
		n.memUsed += mem
		n.gpuUsed += gpu
		if p.Namespace == f.opts.Namespace && p.Labels[labelManagedBy] == managedBy {
			n.ours = append(n.ours, p.Name)
		}
	}
	for i := range out {
		n := &out[i]
		c := fleet.Capacity{CPUCores: int(n.cpu), RAMBytes: n.mem, AvailableBytes: n.mem - n.memUsed}
		for j := range n.gpus {
			c.GPUs = append(c.GPUs, fleet.Card{Index: int(j), Class: n.class, MemoryBytes: cards[n.name]})
		}
		// What pods request is what the scheduler counts: all of it is
		// taken already.
		n.room = f.opts.Headroom.Room(n.name, c, n.memUsed, 0)
		n.room.Replicas = slices.Clone(n.ours)
		n.mem -= n.room.Kept
	}
	slices.SortFunc(out, func(a, b node) int { return strings.Compare(a.name, b.name) })
	return out
}

// requests are what a pod asks of its node, counted as the scheduler does:
// its containers together, or its largest init container if more.
func requests(p *corev1.Pod, gpu corev1.ResourceName) (cpu, mem, gpus int64) {
	for _, c := range p.Spec.Containers {
		r := c.Resources.Requests
		cpu += r.Cpu().MilliValue()
		mem += r.Memory().Value()
		q := r[gpu]
		gpus += q.Value()
	}
	for _, c := range p.Spec.InitContainers {
		r := c.Resources.Requests
		q := r[gpu]
		cpu, mem, gpus = max(cpu, r.Cpu().MilliValue()), max(mem, r.Memory().Value()), max(gpus, q.Value())
	}
	return (cpu + 999) / 1000, mem, gpus
}

// classOf is the planner's class of a card by its product label
// ("NVIDIA-L4" is the L4), else the product itself without the vendor.
func classOf(product string) string {
	if product == "" {
		return ""
	}
	name := product
	for _, prefix := range []string{"NVIDIA-", "Tesla-", "NVIDIA-Tesla-"} {
		name = strings.TrimPrefix(name, prefix)
	}
	if c, ok := plan.LookupClass(name); ok {
		return c.Name
	}
	return name
}

// cardBytes is a card's memory: GPU feature discovery's
// nvidia.com/gpu.memory label (MiB) when the node has it, else the
// class's.
func cardBytes(n *corev1.Node, product string) int64 {
	if mib, err := strconv.ParseInt(n.Labels["nvidia.com/gpu.memory"], 10, 64); err == nil && mib > 0 {
		return mib << 20
	}
	if c, ok := plan.LookupClass(classOf(product)); ok {
		return c.MemoryBytes()
	}
	return 0
}

// products are the product label values of the nodes with cards of class,
// for a GPU profile's node affinity; the NVIDIA name when no node has it
// yet, so a node added later with it is chosen.
func (f *cluster) products(class string) []string {
	if class == "" {
		return nil
	}
	var out []string
	for _, n := range f.room() {
		if n.product != "" && strings.EqualFold(n.class, classOf(class)) && !slices.Contains(out, n.product) {
			out = append(out, n.product)
		}
	}
	if len(out) == 0 {
		out = []string{"NVIDIA-" + class}
	}
	slices.Sort(out)
	return out
}

// hardwareExists is whether some node could host one of m's profiles,
// were it idle, the headroom kept.
func (f *Fleet) hardwareExists(m catalog.Model) bool {
	for _, n := range f.room() {
		c := n.room.Capacity()
		for _, p := range m.Profiles {
			p.GPUClass = classOf(p.GPUClass)
			if fleet.CouldHost(p, c) {
				return true
			}
		}
	}
	return false
}

// rooms are the nodes' room (fleet.Room), with what the pods the swap
// rule would give back hold (swap.go).
func (f *Fleet) rooms() []fleet.Room {
	rs := f.room()
	if len(rs) == 0 {
		return nil // not running yet: the caches are not there to read
	}
	give := f.reclaimable()
	out := make([]fleet.Room, 0, len(rs))
	for _, n := range rs {
		r, g := n.room, give[n.name]
		r.Reclaimable, r.ReclaimableBytes = g.pods, g.mem
		// Pods do not say which of a node's cards they hold: the first
		// are held, the last of those by pods that would be given back.
		for i := range r.Cards {
			if j := int64(i); j < n.gpuUsed {
				r.Cards[i].Holder, r.Cards[i].Reclaimable = "in use", j >= n.gpuUsed-g.gpus
			}
		}
		out = append(out, r)
	}
	return out
}

// Nodes are the cluster's nodes with what their pods request (rooms).
func (f *Fleet) Nodes() []fleet.NodeStatus {
	out := []fleet.NodeStatus{}
	for _, r := range f.rooms() {
		out = append(out, r.Status())
	}
	return out
}

// Pool is the cluster's nodes as the planner sees them (fleet.Room's
// PlanNode): allocatable less what pods request, so the plan and the
// scheduler decide on the same figures, the headroom kept, as the local
// fleet's pool counts it.
func (f *Fleet) Pool() []plan.Node {
	out := []plan.Node{}
	for _, r := range f.rooms() {
		out = append(out, r.PlanNode())
	}
	return out
}

// NodeCPUs are the CPU cores of each node with the memory for a replica of
// need bytes.
func (f *Fleet) NodeCPUs(need int64) []int {
	var out []int
	for _, n := range f.room() {
		if n.mem >= need {
			out = append(out, int(n.cpu))
		}
	}
	return out
}

// Use says a request for model, asked at askedAt (its arrival, as the
// gateway saw it, and the time its hold is asked with), is being served
// and that replicas replicas are needed now: the model's Deployment is
// raised to max(Scaling.Min, min(replicas, Scaling.Max)) while requests
// come, and falls back as the local fleet's replicas do (fleet.Demands).
// Call release when the request is over.
func (f *Fleet) Use(model string, replicas int, askedAt time.Time) (release func()) {
	end, more := f.demands.Use(model, replicas, askedAt)
	if more {
		f.queue.Add(model)
	}
	return func() {
		e, ok := end()
		if !ok {
			return
		}
		f.mu.Lock()
		// Its pods may be idle now, or its requests all behind
		// another model's that waits for their room.
		look := len(f.waiting) > 0 && (e.Is.IsZero() || !e.Is.Equal(e.Was))
		f.mu.Unlock()
		if look {
			f.Poke()
		}
	}
}

// want is how many replicas m runs at now: Min, or more while in demand
// (fleet.Demands).
func (f *Fleet) want(m catalog.Model, now time.Time) int { return f.demands.Want(m, now) }

package kubefleet

import (
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"modelserve/internal/plan"
)

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
	if f.up.Load() {
		nodes, _ := f.nodes.List(labels.Everything())
		for _, n := range nodes {
			product := n.Labels[f.opts.GPUProductLabel]
			if product != "" && strings.EqualFold(classOf(product), classOf(class)) && !slices.Contains(out, product) {
				out = append(out, product)
			}
		}
	}
	if len(out) == 0 {
		out = []string{"NVIDIA-" + class}
	}
	slices.Sort(out)
	return out
}

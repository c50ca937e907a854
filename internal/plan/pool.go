package plan

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"modelserve/internal/engine"
)

// DefaultCPUBandwidthGBs is what a node's CPU is taken to read from memory
// per second when nodes.json does not say: two channels of DDR4-2666 peak
// at 42.7 GB/s, and a CPU multiplying a vector by weights streamed from
// memory gets about half of that. Servers with more channels read more; say
// so per node with cpu_bandwidth_gbs rather than have the planner promise
// every machine a server's speed.
const DefaultCPUBandwidthGBs = 20

// Node is one machine of the pool as the planner sees it.
type Node struct {
	Name string `json:"name"`
	// Local is this machine, measured; the others were declared in a
	// nodes file and are taken to be idle.
	Local    bool  `json:"local,omitempty"`
	CPUCores int   `json:"cpu_cores"`
	RAMBytes int64 `json:"ram_bytes"`
	// FreeRAMBytes is what a new replica can have now: the kernel's
	// MemAvailable here, the whole of the RAM for a declared node unless
	// it says otherwise.
	FreeRAMBytes    int64   `json:"free_ram_bytes"`
	CPUBandwidthGBs float64 `json:"cpu_bandwidth_gbs"`
	GPUs            []GPU   `json:"gpus"`
	// Note says what could not be read about the node.
	Note string `json:"note,omitempty"`
}

// GPU is a node's cards of one class.
type GPU struct {
	Class string `json:"class"`
	Count int    `json:"count"`
	// MemoryBytes is each card's; BandwidthGBs each card's peak read
	// rate.
	MemoryBytes  int64   `json:"memory_bytes"`
	BandwidthGBs float64 `json:"bandwidth_gbs"`
	// BandwidthEstimated marks a card the class table lacks, whose
	// bandwidth is UnknownCardBandwidthGBs rather than its datasheet's.
	BandwidthEstimated bool `json:"bandwidth_estimated,omitempty"`
	// FreeBytes is each card's free memory now, Count of them.
	FreeBytes []int64 `json:"free_bytes"`
}

// cards is how many of the node's cards of a class there are, and how
// many of them have at least need bytes free.
func (n Node) cards(class string, need int64) (total, free int) {
	for _, g := range n.GPUs {
		if g.Class != class {
			continue
		}
		total += g.Count
		for _, f := range g.FreeBytes {
			if f >= need {
				free++
			}
		}
	}
	return total, free
}

// class is the node's description of a class it has: memory and bandwidth
// as measured or declared, which may differ from the table's.
func (n Node) class(name string) (GPU, bool) {
	for _, g := range n.GPUs {
		if g.Class == name {
			return g, true
		}
	}
	return GPU{}, false
}

// LocalNode is this machine as the engine package reads it (its cores,
// memory and NVIDIA cards), its cards grouped by class. A failing
// nvidia-smi leaves the node without cards and says so in Note.
func LocalNode() (Node, error) {
	m, err := engine.ReadMachine(context.Background())
	if err != nil {
		return Node{}, err
	}
	return Node{
		Name: m.Name, Local: true, CPUCores: m.CPUCores,
		RAMBytes: m.RAMBytes, FreeRAMBytes: m.AvailableBytes, CPUBandwidthGBs: DefaultCPUBandwidthGBs,
		GPUs: GPUsOf(m.Cards), Note: m.Note,
	}, nil
}

// CardClass is the planner's class of a card its driver names reported,
// with memoryBytes of memory ("L4" for "NVIDIA L4"; a card the table
// lacks is named for itself).
func CardClass(reported string, memoryBytes int64) string {
	return classForCard(reported, memoryBytes).Name
}

// GPUsOf is the machine's cards grouped by class in the order they first
// appear, each class with the least memory of its cards and each card's
// free memory.
func GPUsOf(cards []engine.Card) []GPU {
	gpus := []GPU{}
	for _, card := range cards {
		c := classForCard(card.Name, card.MemoryBytes)
		j := slices.IndexFunc(gpus, func(g GPU) bool { return g.Class == c.Name })
		if j < 0 {
			gpus = append(gpus, GPU{Class: c.Name, MemoryBytes: card.MemoryBytes, BandwidthGBs: c.BandwidthGBs,
				BandwidthEstimated: c.Estimated, FreeBytes: []int64{}})
			j = len(gpus) - 1
		}
		g := &gpus[j]
		g.Count++
		g.MemoryBytes = min(g.MemoryBytes, card.MemoryBytes)
		g.FreeBytes = append(g.FreeBytes, max(0, card.MemoryBytes-card.UsedBytes))
	}
	return gpus
}

// nodeFile is one node as a nodes file declares it.
type nodeFile struct {
	Name            string    `json:"name"`
	CPUCores        int       `json:"cpu_cores"`
	RAMGB           float64   `json:"ram_gb"`
	FreeRAMGB       *float64  `json:"free_ram_gb"`
	CPUBandwidthGBs float64   `json:"cpu_bandwidth_gbs"`
	GPUs            []gpuFile `json:"gpus"`
}

type gpuFile struct {
	Class        string  `json:"class"`
	Count        int     `json:"count"`
	MemoryGB     float64 `json:"memory_gb"`
	BandwidthGBs float64 `json:"bandwidth_gbs"`
}

// ParseNodes reads nodes declared as a JSON list of
// {name, cpu_cores, ram_gb, cpu_bandwidth_gbs?, free_ram_gb?, gpus: [{class, count, memory_gb?, bandwidth_gbs?}]};
// name is what sentences call the text. Card classes are the table's
// (LookupClass); a card it lacks needs its memory_gb.
func ParseNodes(name string, b []byte) ([]Node, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("the nodes file %s is not a JSON list of nodes%s: %v", name, where(b, err), err)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("the nodes file %s lists no nodes: declare at least one", name)
	}
	seen := map[string]bool{}
	out := make([]Node, 0, len(raw))
	for i, r := range raw {
		var nf nodeFile
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&nf); err != nil {
			return nil, fmt.Errorf("node %d of the nodes file %s is not a node: %v; a node has name, cpu_cores, ram_gb, "+
				"cpu_bandwidth_gbs, free_ram_gb and gpus [{class, count, memory_gb, bandwidth_gbs}]", i+1, name, err)
		}
		n, err := nf.node()
		if err != nil {
			return nil, fmt.Errorf("node %d of the nodes file %s: %w", i+1, name, err)
		}
		if seen[n.Name] {
			return nil, fmt.Errorf("the nodes file %s names %q twice: give each node its own name", name, n.Name)
		}
		seen[n.Name] = true
		out = append(out, n)
	}
	return out, nil
}

func (nf nodeFile) node() (Node, error) {
	name := strings.TrimSpace(nf.Name)
	switch {
	case name == "":
		return Node{}, errors.New("it has no name")
	case nf.CPUCores <= 0:
		return Node{}, fmt.Errorf("%s has no cpu_cores: give how many cores it computes on", name)
	case nf.RAMGB <= 0:
		return Node{}, fmt.Errorf("%s has no ram_gb: give its memory in GB", name)
	case nf.CPUBandwidthGBs < 0:
		return Node{}, fmt.Errorf("%s has a negative cpu_bandwidth_gbs", name)
	}
	// The file's figures are GiB, as a person writes them; the node's
	// bytes, as the planner and the fleets count.
	n := Node{Name: name, CPUCores: nf.CPUCores, RAMBytes: Bytes(nf.RAMGB), FreeRAMBytes: Bytes(nf.RAMGB),
		CPUBandwidthGBs: nf.CPUBandwidthGBs, GPUs: []GPU{}}
	if nf.FreeRAMGB != nil {
		if *nf.FreeRAMGB < 0 || *nf.FreeRAMGB > nf.RAMGB {
			return Node{}, fmt.Errorf("%s has free_ram_gb %.0f, which is not between 0 and its ram_gb %.0f", name, *nf.FreeRAMGB, nf.RAMGB)
		}
		n.FreeRAMBytes = Bytes(*nf.FreeRAMGB)
	}
	if n.CPUBandwidthGBs == 0 {
		n.CPUBandwidthGBs = DefaultCPUBandwidthGBs
	}
	for _, g := range nf.GPUs {
		if g.Count <= 0 {
			return Node{}, fmt.Errorf("%s declares %d cards of %q: give a count of 1 or more", name, g.Count, g.Class)
		}
		c, known := LookupClass(g.Class)
		switch {
		case known:
			if g.MemoryGB > 0 {
				c.MemoryGB = g.MemoryGB
			}
			if g.BandwidthGBs > 0 {
				c.BandwidthGBs = g.BandwidthGBs
			}
		case strings.TrimSpace(g.Class) == "":
			return Node{}, fmt.Errorf("%s declares cards with no class: give one of %s", name, strings.Join(Classes(), ", "))
		case g.MemoryGB <= 0:
			return Node{}, fmt.Errorf("%s declares cards of class %q, which the planner does not know: use one of %s, "+
				"or give its memory_gb (and bandwidth_gbs)", name, g.Class, strings.Join(Classes(), ", "))
		default:
			c = Class{Name: strings.TrimSpace(g.Class), MemoryGB: g.MemoryGB, BandwidthGBs: g.BandwidthGBs}
			if c.BandwidthGBs <= 0 {
				c.BandwidthGBs, c.Estimated = UnknownCardBandwidthGBs, true
			}
		}
		free := make([]int64, g.Count)
		for i := range free {
			free[i] = c.MemoryBytes()
		}
		if i := slices.IndexFunc(n.GPUs, func(x GPU) bool { return x.Class == c.Name }); i >= 0 {
			n.GPUs[i].Count += g.Count
			n.GPUs[i].FreeBytes = append(n.GPUs[i].FreeBytes, free...)
			continue
		}
		n.GPUs = append(n.GPUs, GPU{Class: c.Name, Count: g.Count, MemoryBytes: c.MemoryBytes(),
			BandwidthGBs: c.BandwidthGBs, BandwidthEstimated: c.Estimated, FreeBytes: free})
	}
	return n, nil
}

// where is " (line N)" for a JSON syntax error, so a hand-edited file's
// mistake is found without counting bytes.
func where(b []byte, err error) string {
	var syn *json.SyntaxError
	if !errors.As(err, &syn) {
		return ""
	}
	return fmt.Sprintf(" (line %d)", 1+bytes.Count(b[:min(int(syn.Offset), len(b))], []byte("\n")))
}

// GiB is b bytes in GiB, and Bytes such a figure in bytes: the one place
// memory crosses between the two. The planner and the fleets count bytes;
// GiB are what a person reads and writes (a nodes file's ram_gb, a card
// class's memory, an option's need_gb).
func GiB(b int64) float64 { return float64(b) / (1 << 30) }

// Bytes is gb GiB in bytes, rounded to the nearest byte (GiB).
func Bytes(gb float64) int64 { return int64(math.Round(gb * (1 << 30))) }

package plan

import (
	"math"
	"strings"
)

// Class is a kind of card: how much memory it has and how fast that memory
// is read. Bandwidth decides tokens per second more than anything else: a
// reply is written one token at a time, and every token reads the weights.
type Class struct {
	// Name is what operators and nodes.json call it: "L4", "A100-80GB".
	Name         string  `json:"name"`
	MemoryGB     float64 `json:"memory_gb"`
	BandwidthGBs float64 `json:"bandwidth_gbs"`
	// Estimated marks a bandwidth the planner guessed (a card not in the
	// table), so that its tokens per second are read as a floor.
	Estimated bool `json:"estimated,omitempty"`
	// match are upper-case pieces of the names nvidia-smi and rocm-smi
	// report for the card; memory then tells apart the sizes of one model.
	match []string
}

// MemoryBytes is the class's memory in bytes, as nodes count it; the table
// and a nodes file give it in GB, as datasheets do.
func (c Class) MemoryBytes() int64 { return Bytes(c.MemoryGB) }

// classes are the cards the planner knows. Every figure is the vendor's
// datasheet for the card (memory as sold, peak memory bandwidth); where a
// card comes in more than one form the row says which form it is.
var classes = []Class{
	// NVIDIA T4 datasheet: 16 GB GDDR6, 320+ GB/s.
	{Name: "T4", MemoryGB: 16, BandwidthGBs: 320, match: []string{"T4"}},
	// NVIDIA L4 datasheet: 24 GB GDDR6, 300 GB/s.
	{Name: "L4", MemoryGB: 24, BandwidthGBs: 300, match: []string{"L4"}},
	// NVIDIA A10 datasheet: 24 GB GDDR6, 600 GB/s. AWS's A10G reports
	// itself as "A10G" and is matched here too, as it has the A10's memory.
	{Name: "A10", MemoryGB: 24, BandwidthGBs: 600, match: []string{"A10", "A10G"}},
	// NVIDIA V100 datasheet (SXM2, 32 GB HBM2): 900 GB/s.
	{Name: "V100-32GB", MemoryGB: 32, BandwidthGBs: 900, match: []string{"V100"}},
	// NVIDIA V100 datasheet (SXM2, 16 GB HBM2): 900 GB/s.
	{Name: "V100-16GB", MemoryGB: 16, BandwidthGBs: 900, match: []string{"V100"}},
	// NVIDIA A40 datasheet: 48 GB GDDR6, 696 GB/s.
	{Name: "A40", MemoryGB: 48, BandwidthGBs: 696, match: []string{"A40"}},
	// NVIDIA L40S datasheet: 48 GB GDDR6, 864 GB/s.
	{Name: "L40S", MemoryGB: 48, BandwidthGBs: 864, match: []string{"L40S"}},
	// NVIDIA L40 datasheet: 48 GB GDDR6, 864 GB/s.
	{Name: "L40", MemoryGB: 48, BandwidthGBs: 864, match: []string{"L40"}},
	// NVIDIA RTX A6000 datasheet: 48 GB GDDR6, 768 GB/s.
	{Name: "RTX-A6000", MemoryGB: 48, BandwidthGBs: 768, match: []string{"RTX A6000"}},
	// NVIDIA RTX 6000 Ada Generation datasheet: 48 GB GDDR6, 960 GB/s.
	{Name: "RTX-6000-Ada", MemoryGB: 48, BandwidthGBs: 960, match: []string{"RTX 6000 ADA"}},
	// NVIDIA A100 datasheet (40 GB HBM2): 1,555 GB/s.
	{Name: "A100-40GB", MemoryGB: 40, BandwidthGBs: 1555, match: []string{"A100"}},
	// NVIDIA A100 datasheet (80 GB HBM2e, SXM): 2,039 GB/s; the PCIe card's
	// 1,935 GB/s is within the estimate's precision.
	{Name: "A100-80GB", MemoryGB: 80, BandwidthGBs: 2039, match: []string{"A100"}},
	// NVIDIA H100 datasheet (SXM, 80 GB HBM3): 3.35 TB/s.
	{Name: "H100-80GB", MemoryGB: 80, BandwidthGBs: 3350, match: []string{"H100 80GB HBM3", "H100-SXM", "H100 SXM"}},
	// NVIDIA H100 datasheet (PCIe, 80 GB HBM2e): 2 TB/s.
	{Name: "H100-PCIe", MemoryGB: 80, BandwidthGBs: 2000, match: []string{"H100 PCIE", "H100-PCIE"}},
	// NVIDIA H100 datasheet (NVL, 94 GB HBM3): 3.9 TB/s.
	{Name: "H100-NVL", MemoryGB: 94, BandwidthGBs: 3900, match: []string{"H100 NVL"}},
	// NVIDIA H200 datasheet: 141 GB HBM3e, 4.8 TB/s.
	{Name: "H200", MemoryGB: 141, BandwidthGBs: 4800, match: []string{"H200"}},
	// NVIDIA GeForce RTX 3090 specifications: 24 GB GDDR6X, 936 GB/s.
	{Name: "RTX-3090", MemoryGB: 24, BandwidthGBs: 936, match: []string{"RTX 3090"}},
	// NVIDIA GeForce RTX 4090 specifications: 24 GB GDDR6X, 1,008 GB/s.
	{Name: "RTX-4090", MemoryGB: 24, BandwidthGBs: 1008, match: []string{"RTX 4090"}},
	// NVIDIA GeForce RTX 5090 specifications: 32 GB GDDR7, 1,792 GB/s.
	{Name: "RTX-5090", MemoryGB: 32, BandwidthGBs: 1792, match: []string{"RTX 5090"}},
	// AMD Instinct MI250X datasheet: 128 GB HBM2e, 3.2 TB/s.
	{Name: "MI250X", MemoryGB: 128, BandwidthGBs: 3200, match: []string{"MI250X"}},
	// AMD Instinct MI300X datasheet: 192 GB HBM3, 5.3 TB/s.
	{Name: "MI300X", MemoryGB: 192, BandwidthGBs: 5300, match: []string{"MI300X"}},
}

// UnknownCardBandwidthGBs is what a card the table lacks is taken to read
// per second: the slowest card in the table (the L4's 300 GB/s). Guessing
// low makes a plan promise fewer tokens a second than it may get, never more.
const UnknownCardBandwidthGBs = 300

// LookupClass finds a class by the name operators use, in any case and with
// spaces or dashes ("a100-80gb", "RTX 4090").
// Every node of a pool is looked up on every read of it (a cluster's
// nodes name their cards by label), so it allocates nothing: building a
// strings.Replacer per class per call made reading 1,000 nodes take a
// quarter of a second.
func LookupClass(name string) (Class, bool) {
	for _, c := range classes {
		if sameClass(c.Name, name) {
			return c, true
		}
	}
	return Class{}, false
}

// Classes are the cards the planner knows, for a sentence listing them.
func Classes() []string {
	out := make([]string, 0, len(classes))
	for _, c := range classes {
		out = append(out, c.Name)
	}
	return out
}

// sameClass says a and b name one class: equal in any case once spaces,
// dashes and underscores are left out.
func sameClass(a, b string) bool {
	i, j := 0, 0
	for {
		for i < len(a) && isSeparator(a[i]) {
			i++
		}
		for j < len(b) && isSeparator(b[j]) {
			j++
		}
		if i == len(a) || j == len(b) {
			return i == len(a) && j == len(b)
		}
		if upper(a[i]) != upper(b[j]) {
			return false
		}
		i, j = i+1, j+1
	}
}

func isSeparator(c byte) bool {
	return c == ' ' || c == '-' || c == '_' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func upper(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}

// classForCard turns a card as nvidia-smi reports it into a class: one from
// the table when the name and memory match, else a class of its own named
// after the card, with its measured memory and an estimated bandwidth.
func classForCard(reported string, memoryBytes int64) Class {
	memoryGB := GiB(memoryBytes)
	name := strings.ToUpper(reported)
	for _, prefix := range []string{"NVIDIA ", "TESLA ", "GEFORCE ", "AMD ", "INSTINCT "} {
		name = strings.ReplaceAll(name, prefix, "")
	}
	name = " " + name + " "
	best, bestGap := Class{}, math.Inf(1)
	for _, c := range classes {
		for _, m := range c.match {
			// The piece must stand alone: "L4" is not "L40S".
			if !containsWord(name, m) {
				continue
			}
			// A card shows a little less than it is sold with (ECC, the
			// driver's reserve): it matches a size it does not exceed by
			// much and reaches at least 85% of.
			gap := math.Abs(c.MemoryGB - memoryGB)
			if memoryGB >= 0.85*c.MemoryGB && memoryGB <= 1.1*c.MemoryGB && gap < bestGap {
				best, bestGap = c, gap
			}
		}
	}
	if best.Name != "" {
		return best
	}
	return Class{
		Name:         strings.Join(strings.Fields(strings.TrimSpace(reported)), "-"),
		MemoryGB:     memoryGB,
		BandwidthGBs: UnknownCardBandwidthGBs,
		Estimated:    true,
	}
}

func containsWord(padded, word string) bool {
	for i := 0; ; {
		j := strings.Index(padded[i:], word)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(word)
		if !isAlnum(padded[start-1]) && (end >= len(padded) || !isAlnum(padded[end])) {
			return true
		}
		i = start + 1
	}
}

func isAlnum(b byte) bool {
	return b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

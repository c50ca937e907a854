package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"modelserve/internal/fleet"
)

// Fleet is what the fleet's figures are read from (fleet.Fleet): its
// replicas and its nodes as they stand.
type Fleet interface {
	Replicas() []fleet.Replica
	Nodes() []fleet.NodeStatus
}

// WatchFleet adds the fleet's figures to /metrics, read from f at each
// scrape: replicas by model and state, each node's memory free and
// promised, and each replica's memory estimate beside what it measured.
// Read at the scrape rather than pushed on each change, a figure is never
// older than the scrape, and a replica gone is gone from the next one.
func (m *Metrics) WatchFleet(f Fleet) {
	m.reg.MustRegister(newFleetCollector(f))
}

// fleetCollector reads the fleet at each scrape.
type fleetCollector struct {
	f                                            Fleet
	replicas, nodeMemory, nodeFree, nodePromised *prometheus.Desc
	estimate, resident                           *prometheus.Desc
	evictions, memoryWaits                       *prometheus.Desc
}

// memoryWaiter is a fleet that tallies how long models waited for memory
// (both fleets do; fleet.Waits).
type memoryWaiter interface {
	MemoryWaits() fleet.WaitTally
}

// evictor is a fleet that gives replicas back to make room and counts
// them (the local one does; fleet.Fleet.Evictions).
type evictor interface {
	Evictions() []fleet.Eviction
}

func newFleetCollector(f Fleet) fleetCollector {
	return fleetCollector{f: f,
		replicas: prometheus.NewDesc("modelserve_replicas",
			"Replicas by model and state (starting, loading, ready, stopping, failed, stopped); every state is "+
				"given for each model that has a replica, 0 where none is in it.",
			[]string{"model", "state"}, nil),
		nodeMemory: prometheus.NewDesc("modelserve_node_memory_bytes",
			"Each node's memory.", []string{"node"}, nil),
		nodeFree: prometheus.NewDesc("modelserve_node_memory_free_bytes",
			"What another replica can be promised on each node, after the promises to replicas still loading.",
			[]string{"node"}, nil),
		nodePromised: prometheus.NewDesc("modelserve_node_memory_promised_bytes",
			"The sum of the memory figures of the replicas placed on each node.", []string{"node"}, nil),
		estimate: prometheus.NewDesc("modelserve_replica_memory_estimate_bytes",
			"The memory each replica was placed by: the check step's estimate.", []string{"model", "replica"}, nil),
		resident: prometheus.NewDesc("modelserve_replica_memory_resident_bytes",
			"Each ready replica's engine's resident memory, measured, beside its estimate.", []string{"model", "replica"}, nil),
		evictions: prometheus.NewDesc("modelserve_fleet_evictions_total",
			"Replicas given back to make room for another model, by model and why: swap (idle, on demand) or critical "+
				"(opportunistic, for a critical model).", []string{"model", "reason"}, nil),
		memoryWaits: prometheus.NewDesc("modelserve_fleet_memory_wait_seconds",
			"How long models asked for waited for memory: from the first look that found no room for a replica (others "+
				"being given back, stopping, or answering until idle) to the start of the replica it was made for; the "+
				"engine's load comes after.", nil, nil),
	}
}

func (c fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.replicas, c.nodeMemory, c.nodeFree, c.nodePromised, c.estimate, c.resident, c.evictions, c.memoryWaits} {
		ch <- d
	}
}

func (c fleetCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]map[fleet.State]int{}
	for _, r := range c.f.Replicas() {
		if counts[r.Model] == nil {
			counts[r.Model] = map[fleet.State]int{}
		}
		counts[r.Model][r.State]++
		if r.EstimateBytes > 0 {
			ch <- prometheus.MustNewConstMetric(c.estimate, prometheus.GaugeValue, float64(r.EstimateBytes), r.Model, r.ID)
		}
		if r.RSSBytes > 0 {
			ch <- prometheus.MustNewConstMetric(c.resident, prometheus.GaugeValue, float64(r.RSSBytes), r.Model, r.ID)
		}
	}
	for model, byState := range counts {
		// Every state for each model, so one with no replica reads 0
		// rather than vanishing: a vanished series silences an alert.
		states := []fleet.State{fleet.Starting, fleet.Loading, fleet.Ready, fleet.Stopping, fleet.Failed, fleet.Stopped}
		for st := range byState {
			if !slices.Contains(states, st) {
				states = append(states, st) // a state newer than this list
			}
		}
		for _, st := range states {
			ch <- prometheus.MustNewConstMetric(c.replicas, prometheus.GaugeValue, float64(byState[st]), model, string(st))
		}
	}
	for _, n := range c.f.Nodes() {
		ch <- prometheus.MustNewConstMetric(c.nodeMemory, prometheus.GaugeValue, float64(n.RAMBytes), n.Name)
		ch <- prometheus.MustNewConstMetric(c.nodeFree, prometheus.GaugeValue, float64(n.FreeBytes), n.Name)
		ch <- prometheus.MustNewConstMetric(c.nodePromised, prometheus.GaugeValue, float64(n.PromisedBytes), n.Name)
	}
	if w, ok := c.f.(memoryWaiter); ok {
		t := w.MemoryWaits()
		buckets := make(map[float64]uint64, len(fleet.MemoryWaitBounds))
		for i, b := range fleet.MemoryWaitBounds {
			buckets[b.Seconds()] = t.Buckets[i]
		}
		ch <- prometheus.MustNewConstHistogram(c.memoryWaits, t.Count, t.Sum.Seconds(), buckets)
	}
	if e, ok := c.f.(evictor); ok {
		for _, ev := range e.Evictions() {
			ch <- prometheus.MustNewConstMetric(c.evictions, prometheus.CounterValue, float64(ev.Count), ev.Model, ev.Reason)
		}
	}
}

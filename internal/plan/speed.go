package plan

import "modelserve/catalog"

// ServedSpeed is the plan's estimate of a served profile's tokens a second
// for one reply, from the same rule the options are estimated by: the
// memory bandwidth where it runs (the fastest of the pool's nodes of its
// kind, else the default or the class table's) over the bytes of weights
// each token reads. It also returns that bandwidth in GB/s, for the page
// to say what the estimate is from. A mixture of experts reads only its
// active experts, which the weights alone do not say: for one, this is a
// floor. 0 when weightsBytes is not known.
func ServedSpeed(p catalog.Profile, weightsBytes int64, nodes []Node) (tokensPerSec, bandwidthGBs float64) {
	if weightsBytes <= 0 {
		return 0, 0
	}
	if p.GPUClass == "" {
		for _, n := range nodes {
			if n.CPUCores > 0 {
				bandwidthGBs = max(bandwidthGBs, n.CPUBandwidthGBs)
			}
		}
		if bandwidthGBs == 0 {
			bandwidthGBs = DefaultCPUBandwidthGBs
		}
	} else {
		for _, n := range nodes {
			if g, ok := n.class(p.GPUClass); ok {
				bandwidthGBs = max(bandwidthGBs, g.BandwidthGBs)
			}
		}
		if bandwidthGBs == 0 {
			bandwidthGBs = UnknownCardBandwidthGBs
			if c, ok := LookupClass(p.GPUClass); ok {
				bandwidthGBs = c.BandwidthGBs
			}
		}
		if p.Engine == EngineVLLM {
			// As placeGPU: vLLM's cards of a node read their slices at once.
			bandwidthGBs *= float64(max(p.GPUsPerNode, 1))
		}
	}
	return tokensPerSecond(bandwidthGBs, float64(weightsBytes)), bandwidthGBs
}

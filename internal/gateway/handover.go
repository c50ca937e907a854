package gateway

import (
	"maps"
	"slices"
)

// HandedOver says this modelserve has handed its port to a new one, whose
// fleet starts the replicas from now on: this one's has stopped, and a
// request waiting here for a replica to start (a model loaded on demand,
// or one whose replica was starting) would wait for one that never comes.
// Each is answered at once with handingOver, a 503 the OpenAI clients
// retry on a new connection, which reaches the new process; so is each
// such request that arrives after. A request waiting for a slot of a
// replica that is ready is still answered here, as the slots free up.
func (g *Gateway) HandedOver() {
	g.handedOver.Store(true)
	g.mu.Lock()
	pools := slices.Collect(maps.Values(g.pools))
	g.mu.Unlock()
	for _, p := range pools {
		p.lookAgain()
	}
}

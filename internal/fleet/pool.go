package fleet

import "modelserve/internal/plan"

// Pool is the fleet's nodes as the planner sees them (Room.PlanNode): the
// planner's pool, so that what the serve page says fits and where the job
// places a replica are decided on the same nodes and the same free
// memory.
func (f *Fleet) Pool() []plan.Node {
	out := []plan.Node{}
	for _, r := range f.rooms() {
		out = append(out, r.PlanNode())
	}
	return out
}

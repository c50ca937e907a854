package jobs

import "modelserve/internal/plan"

// or is a, else b.
func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// label is where a layout runs, as the plan step says it.
func label(o plan.Option) string {
	if o.CPU {
		return "cpu"
	}
	return o.Label()
}

// where is a layout for a sentence: "of the node's RAM", "on 2×L4".
func where(o plan.Option) string {
	if o.CPU {
		return "of the node's RAM"
	}
	return "on " + o.Label()
}

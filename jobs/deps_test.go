package jobs

import (
	"modelserve/catalog"
	"modelserve/internal/hf"
	"modelserve/internal/metrics"
	"modelserve/internal/mirror"
	"modelserve/internal/plan"
)

// The parts main wires in satisfy what jobs declares it needs.
var (
	_ Registry        = (*hf.Client)(nil)
	_ Registry        = (*hf.Local)(nil)
	_ downloadChecker = (*hf.Client)(nil)
	_ Mirror          = (*mirror.Mirror)(nil)
	_ Catalog         = (*catalog.Store)(nil)
	_ Planner         = (*plan.Planner)(nil)
	_ Metrics         = (*metrics.Metrics)(nil)
)

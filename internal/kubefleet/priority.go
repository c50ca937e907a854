package kubefleet

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"modelserve/catalog"
)

// priorityClasses are the PriorityClasses of deploy/priority.yaml, one for
// each of the catalog's classes: a critical model's pods outrank the
// others, so the scheduler may preempt an opportunistic pod to place one,
// as the local fleet stops opportunistic replicas for it. Without them a
// class changed nothing on a cluster.
var priorityClasses = map[string]string{
	catalog.ClassCritical:      "modelserve-critical",
	catalog.ClassStandard:      "modelserve-standard",
	catalog.ClassOpportunistic: "modelserve-opportunistic",
}

// findPriorityClasses says whether the cluster has every class of
// priorityClasses. A pod naming a PriorityClass the cluster lacks is
// refused at its creation, so a cluster without them (priority.yaml not
// applied) gets pods that name none, and the log says so once.
func (f *cluster) findPriorityClasses(ctx context.Context) bool {
	for _, name := range priorityClasses {
		_, err := f.opts.Client.SchedulingV1().PriorityClasses().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			why := err.Error()
			if apierrors.IsNotFound(err) {
				why = "it is not in the cluster"
			}
			f.log.Warn("pods name no PriorityClass, so a model's class does not decide which pods the scheduler preempts: "+
				"apply deploy/priority.yaml and restart modelserve", "priority_class", name, "why", why)
			return false
		}
	}
	return true
}

// priorityClass is the PriorityClass m's pods name: its class's, "" when
// the cluster has none.
func (f *cluster) priorityClass(m catalog.Model) string {
	if !f.priorities {
		return ""
	}
	if m.Class == "" {
		return priorityClasses[catalog.ClassStandard]
	}
	return priorityClasses[m.Class]
}

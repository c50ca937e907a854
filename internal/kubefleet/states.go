package kubefleet

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"modelserve/internal/fleet"
)

// The states a pod adds to the local fleet's: its weights being fetched by
// the init container, and a container the kubelet keeps restarting.
const (
	Fetching fleet.State = "fetching"
	Failing  fleet.State = "failing"
)

// observation is what a model's pods say together.
type observation struct {
	ready, scheduled, failures int
	// unschedulable counts each Deployment's pods the scheduler found no
	// node for; placement is the scheduler's words for the first.
	unschedulable map[string]int
	placement     string
	// crashed is why the model is to be parked, when a container failed
	// to start maxFailures times.
	crashed string
}

// observe reads a model's pods; those of failed, which failed before an
// operator unparked the model, cannot park it again.
func observe(pods []*corev1.Pod, maxFailures int, failed map[types.UID]bool) observation {
	o := observation{unschedulable: map[string]int{}}
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if p.Spec.NodeName != "" {
			o.scheduled++
		}
		if isReady(p) {
			o.ready++
		}
		if msg, ok := unschedulable(p); ok {
			o.unschedulable[p.Labels[labelDeployment]]++
			if o.placement == "" {
				o.placement = msg
			}
		}
		for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
			o.failures = max(o.failures, int(cs.RestartCount))
			if o.crashed == "" && !cs.Ready && int(cs.RestartCount) >= maxFailures && cs.LastTerminationState.Terminated != nil &&
				!failed[p.UID] {
				o.crashed = crashReason(cs)
			}
		}
	}
	return o
}

// unschedulable is the scheduler's sentence for a pod it found no node
// for: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
func unschedulable(p *corev1.Pod) (string, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c.Message, true
		}
	}
	return "", false
}

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// crashReason is why a container keeps failing, in its own words: its
// termination message (its log's end, with FallbackToLogsOnError).
func crashReason(cs corev1.ContainerStatus) string {
	t := cs.LastTerminationState.Terminated
	what := "the engine"
	if cs.Name != "engine" {
		what = "fetching the weights"
	}
	s := fmt.Sprintf("%s failed %d times; it last exited with status %d", what, cs.RestartCount, t.ExitCode)
	if t.Reason != "" && t.Reason != "Error" {
		s += " (" + t.Reason + ")"
	}
	if msg := lastLines(t.Message, 3); msg != "" {
		s += ": " + msg
	}
	return s
}

func lastLines(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "; ")
}

// podState is a replica's state and what more there is to say of it, from
// its pod.
func podState(p *corev1.Pod) (fleet.State, string) {
	if p.DeletionTimestamp != nil {
		return fleet.Stopping, "its pod is being deleted"
	}
	if msg, ok := unschedulable(p); ok {
		return fleet.Starting, "placing: " + msg
	}
	if p.Spec.NodeName == "" {
		return fleet.Starting, "placing: waiting for the scheduler"
	}
	for _, cs := range p.Status.InitContainerStatuses {
		switch {
		case cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff":
			return Failing, "fetching the weights keeps failing: " + lastLines(terminated(cs), 2)
		case cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0:
		default:
			return Fetching, "fetching the weights from the mirror"
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff" {
			return Failing, fmt.Sprintf("the engine keeps failing (%d restarts): %s", cs.RestartCount, lastLines(terminated(cs), 2))
		}
	}
	switch {
	case p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded:
		return fleet.Failed, "its pod ended: " + p.Status.Message
	case isReady(p):
		return fleet.Ready, ""
	case p.Status.Phase == corev1.PodRunning:
		return fleet.Loading, "the engine is loading the weights"
	}
	return fleet.Starting, "starting on " + p.Spec.NodeName
}

func terminated(cs corev1.ContainerStatus) string {
	if t := cs.LastTerminationState.Terminated; t != nil {
		return cmp.Or(t.Message, t.Reason)
	}
	return ""
}

// replica is a pod as the API shows a replica.
func replica(p *corev1.Pod) fleet.Replica {
	state, detail := podState(p)
	r := fleet.Replica{
		ID: p.Name, Model: p.Annotations[annotationModel], Node: p.Spec.NodeName,
		State: state, Detail: detail, Started: p.CreationTimestamp.Time,
	}
	if p.Status.PodIP != "" {
		r.Endpoint = fmt.Sprintf("http://%s:%d", p.Status.PodIP, enginePort)
	}
	for _, c := range p.Spec.Containers {
		if c.Name == "engine" {
			r.Engine = engineOfImage(c.Env)
			r.EstimateBytes = c.Resources.Requests.Memory().Value()
			r.Threads = int(c.Resources.Requests.Cpu().Value())
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		r.Failures = int(cs.RestartCount)
		if t := cs.LastTerminationState.Terminated; t != nil {
			r.LastError = fmt.Sprintf("exited with status %d: %s", t.ExitCode, lastLines(t.Message, 3))
		}
		if cs.State.Running != nil {
			r.Started = cs.State.Running.StartedAt.Time
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			r.ReadyAt = c.LastTransitionTime.Time
		}
	}
	return r
}

// Replicas are the fleet's pods as replicas, by model and name.
func (f *Fleet) Replicas() []fleet.Replica {
	if !f.running() {
		return []fleet.Replica{}
	}
	pods, _ := f.pods.Pods(f.opts.Namespace).List(labels.SelectorFromSet(labels.Set{labelManagedBy: managedBy}))
	out := make([]fleet.Replica, 0, len(pods))
	for _, p := range pods {
		out = append(out, f.drainState(replica(p)))
	}
	slices.SortFunc(out, func(a, b fleet.Replica) int {
		return cmp.Or(strings.Compare(a.Model, b.Model), strings.Compare(a.ID, b.ID))
	})
	return out
}

// Serving are model's ready replicas with an address.
func (f *Fleet) Serving(model string) []fleet.Replica {
	if !f.running() {
		return nil
	}
	var out []fleet.Replica
	for _, p := range f.modelPods(model) {
		if r := f.drainState(replica(p)); r.State == fleet.Ready && r.Endpoint != "" {
			out = append(out, r)
		}
	}
	return out
}

// ModelHealth is how each model of the catalog fares, as of the last
// reconciling.
func (f *Fleet) ModelHealth() []fleet.ModelHealth {
	if !f.running() {
		return []fleet.ModelHealth{}
	}
	f.mu.Lock()
	out := make([]fleet.ModelHealth, 0, len(f.models))
	for _, h := range f.models {
		out = append(out, h)
	}
	f.mu.Unlock()
	// How many serve is read now, as Serving reads it, not as of the
	// last reconciling: a pod turning ready would otherwise show late.
	for i := range out {
		out[i].Ready = 0
		for _, p := range f.modelPods(out[i].Model) {
			if p.DeletionTimestamp == nil && isReady(p) {
				out[i].Ready++
			}
		}
	}
	slices.SortFunc(out, func(a, b fleet.ModelHealth) int { return strings.Compare(a.Model, b.Model) })
	return out
}

package kubefleet

import (
	"cmp"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"modelserve/internal/fleet"
)

// The states a pod adds to the local fleet's: its weights being fetched by
// the init container, and a container the kubelet keeps restarting.
const (
	Fetching fleet.State = "fetching"
	Failing  fleet.State = "failing"
)

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

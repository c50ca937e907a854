package kubefleet

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"modelserve/internal/fleet"
)

// pod is a model's pod on node ("" for none yet), edited by each of edits.
func pod(node string, edits ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "tiny-p0-abc", Labels: map[string]string{labelDeployment: "tiny-p0"}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	for _, e := range edits {
		e(p)
	}
	return p
}

func unplaced(msg string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg})
	}
}

func phase(ph corev1.PodPhase, msg string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Status.Phase, p.Status.Message = ph, msg }
}

func ready(p *corev1.Pod) {
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
}

// fetch is the init container's status; engine the engine's.
func fetch(s corev1.ContainerStatus) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		s.Name = "fetch-weights"
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, s)
	}
}

func engine(s corev1.ContainerStatus) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		s.Name = "engine"
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, s)
	}
}

var (
	running  = corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	finished = corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}
	waiting  = corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}
)

// crashLooping is a container the kubelet is holding back after restarts
// failures, whose last run ended with message.
func crashLooping(restarts int32, message string) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		RestartCount: restarts,
		State:        corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 1, Reason: "Error", Message: message}},
	}
}

// TestPodStates maps each thing a pod can say to the replica state the
// fleet page and the job's placement step show.
func TestPodStates(t *testing.T) {
	deleting := func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }
	for _, c := range []struct {
		name   string
		pod    *corev1.Pod
		state  fleet.State
		detail string
	}{
		{"waiting for the scheduler", pod(""), fleet.Starting, "placing: waiting for the scheduler"},
		{"no node has room", pod("", unplaced("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")),
			fleet.Starting, "placing: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."},
		{"placed, nothing started yet", pod("node-a"), fleet.Starting, "starting on node-a"},
		{"init container not started", pod("node-a", fetch(waiting)), Fetching, "fetching the weights from the mirror"},
		{"weights being fetched", pod("node-a", fetch(running)), Fetching, "fetching the weights from the mirror"},
		{"fetching keeps failing", pod("node-a", fetch(crashLooping(2, "line 1\nwget: server returned error: HTTP/1.1 401 Unauthorized\n"))),
			Failing, "fetching the weights keeps failing: line 1; wget: server returned error: HTTP/1.1 401 Unauthorized"},
		{"weights fetched, engine starting", pod("node-a", fetch(finished), engine(waiting)), fleet.Starting, "starting on node-a"},
		{"engine loading", pod("node-a", phase(corev1.PodRunning, ""), fetch(finished), engine(running)),
			fleet.Loading, "the engine is loading the weights"},
		{"ready", pod("node-a", phase(corev1.PodRunning, ""), fetch(finished), engine(running), ready), fleet.Ready, ""},
		{"engine keeps failing", pod("node-a", phase(corev1.PodRunning, ""), fetch(finished),
			engine(crashLooping(4, "llama_model_load: error loading model: unknown model architecture: 'foo'"))),
			Failing, "the engine keeps failing (4 restarts): llama_model_load: error loading model: unknown model architecture: 'foo'"},
		{"pod ended", pod("node-a", phase(corev1.PodFailed, "The node was low on resource: memory.")),
			fleet.Failed, "its pod ended: The node was low on resource: memory."},
		{"being deleted", pod("node-a", ready, deleting), fleet.Stopping, "its pod is being deleted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			state, detail := podState(c.pod)
			if state != c.state || detail != c.detail {
				t.Errorf("state %s (%q), want %s (%q)", state, detail, c.state, c.detail)
			}
		})
	}
}

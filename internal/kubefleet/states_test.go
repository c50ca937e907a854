package kubefleet

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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

// TestObserveParksAtMaxFailures: a model is parked once a container of its
// has failed maxFailures times, with the container's own last words; fewer
// failures, or a container that came back ready, park nothing.
func TestObserveParksAtMaxFailures(t *testing.T) {
	msg := "build: 11669\nloading\nllama_model_load: error loading model: unknown model architecture: 'foo'\nmain: exiting due to model loading error"
	o := observe([]*corev1.Pod{pod("node-a", fetch(finished), engine(crashLooping(2, msg)))}, 3, nil)
	if o.crashed != "" || o.failures != 2 {
		t.Errorf("2 failures of 3: crashed %q, failures %d; want no park yet, 2 failures", o.crashed, o.failures)
	}
	o = observe([]*corev1.Pod{pod("node-a", fetch(finished), engine(crashLooping(3, msg)))}, 3, nil)
	want := "the engine failed 3 times; it last exited with status 1: loading; llama_model_load: error loading model: unknown model architecture: 'foo'; main: exiting due to model loading error"
	if o.crashed != want {
		t.Errorf("parked for %q\nwant %q", o.crashed, want)
	}
	o = observe([]*corev1.Pod{pod("node-a", fetch(crashLooping(3, "wget: bad address 'modelserve.invalid'")))}, 3, nil)
	if !strings.HasPrefix(o.crashed, "fetching the weights failed 3 times") {
		t.Errorf("a failing fetch parks as %q, want it named as fetching the weights", o.crashed)
	}
	// Unparked: the pod that failed before is not held against the
	// model again, even made in the second of the unpark; one made since
	// (in that same second) is.
	made := func(uid types.UID) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.UID = uid }
	}
	failed := map[types.UID]bool{"before": true}
	if o := observe([]*corev1.Pod{pod("node-a", made("before"), engine(crashLooping(3, msg)))}, 3, failed); o.crashed != "" {
		t.Errorf("a pod that failed before the unpark parks the model again: %q", o.crashed)
	}
	if o := observe([]*corev1.Pod{pod("node-a", made("since"), engine(crashLooping(3, msg)))}, 3, failed); o.crashed == "" {
		t.Error("a pod made since the unpark that failed 3 times does not park the model")
	}
	back := crashLooping(5, msg)
	back.State, back.Ready = running.State, true
	if o := observe([]*corev1.Pod{pod("node-a", fetch(finished), engine(back), ready)}, 3, nil); o.crashed != "" || o.ready != 1 {
		t.Errorf("a container that failed and then came up ready: crashed %q, ready %d", o.crashed, o.ready)
	}
	o = observe([]*corev1.Pod{
		pod("", unplaced("0/2 nodes are available: 2 Insufficient memory.")),
		pod("", unplaced("0/2 nodes are available: 2 Insufficient memory.")),
		pod("node-a", ready),
	}, 3, nil)
	if o.unschedulable["tiny-p0"] != 2 || o.scheduled != 1 || o.placement != "0/2 nodes are available: 2 Insufficient memory." {
		t.Errorf("unschedulable %v, scheduled %d, placement %q", o.unschedulable, o.scheduled, o.placement)
	}
}

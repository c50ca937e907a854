package kubefleet_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"modelserve/catalog"
	"modelserve/internal/catalogtest"
	"modelserve/internal/fleet"
	"modelserve/internal/kubetest"
	"modelserve/internal/testkit"
)

// TestClassesArePriorities runs the fleet on a real control plane with
// deploy/priority.yaml applied: each model's pods name its class's
// PriorityClass, the API server gives them its value (critical above
// standard above opportunistic), and a critical model that finds the only
// card held by an opportunistic one is placed there by the scheduler's
// preemption, the opportunistic model left waiting in the scheduler's
// words.
func TestClassesArePriorities(t *testing.T) {
	c := kubetest.Start(t)
	c.AddNode(t, kubetest.Node{Name: "gpu-1", CPU: 16, Memory: "64Gi", GPUs: 1,
		Labels: map[string]string{"nvidia.com/gpu.product": "NVIDIA-L4"}})
	c.Apply(t, "../../deploy/priority.yaml")
	client := c.Client(t, c.Account(t, "../../deploy/rbac.yaml"))
	mirrorDir := t.TempDir()
	cat := &catalogtest.Catalog{}
	f, _ := runFleet(t, client, cat, mirrorDir)

	onCard := catalog.Profile{Name: "l4", GPUClass: "L4", GPUsPerNode: 1, CardBytes: 8 << 30, RAMBytes: 2 << 30}
	spare := model(mirrorDir, "spare", onCard)
	spare.Class = catalog.ClassOpportunistic
	plain := model(mirrorDir, "plain", catalog.Profile{RAMBytes: 1 << 30, CPUCores: 1})
	cat.Put(spare)
	cat.Put(plain)
	f.Poke()
	for _, name := range []string{"spare", "plain"} {
		testkit.WaitForValue(t, time.Minute, "a ready replica of "+name, func() (fleet.Replica, bool) {
			rs := f.Serving(name)
			return first(rs), len(rs) == 1
		})
	}
	podOf := func(model string) (corev1.Pod, bool) {
		d := deploymentOf(t, c.Admin, model)
		pods, err := c.Admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "modelserve.io/deployment=" + d.Name})
		if err != nil || len(pods.Items) == 0 {
			return corev1.Pod{}, false
		}
		return pods.Items[0], true
	}
	for _, tt := range []struct {
		model, class string
		value        int32
	}{{"spare", "modelserve-opportunistic", 1000}, {"plain", "modelserve-standard", 10000}} {
		p, _ := podOf(tt.model)
		if p.Spec.PriorityClassName != tt.class || p.Spec.Priority == nil || *p.Spec.Priority != tt.value {
			t.Errorf("%s's pod names PriorityClass %q with priority %v; want %s, %d", tt.model, p.Spec.PriorityClassName, p.Spec.Priority, tt.class, tt.value)
		}
	}

	vital := model(mirrorDir, "vital", onCard)
	vital.Class = catalog.ClassCritical
	cat.Put(vital)
	f.Poke()
	r := testkit.WaitForValue(t, time.Minute, "vital ready on the card spare held", func() (fleet.Replica, bool) {
		rs := f.Serving("vital")
		return first(rs), len(rs) == 1
	})
	if r.Node != "gpu-1" {
		t.Errorf("vital runs on %q, want gpu-1", r.Node)
	}
	if p, _ := podOf("vital"); p.Spec.Priority == nil || *p.Spec.Priority != 100000 {
		t.Errorf("vital's pod has priority %v, want modelserve-critical's 100000", p.Spec.Priority)
	}
	h := testkit.WaitForValue(t, time.Minute, "spare to wait for a card", func() (fleet.ModelHealth, bool) {
		h := health(f, "spare")
		return h, h.Unplaceable
	})
	if len(f.Serving("spare")) != 0 {
		t.Errorf("spare still serves beside vital on the one card")
	}
	t.Logf("spare, preempted: %s", h.Placement)
}

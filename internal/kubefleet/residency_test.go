package kubefleet

import (
	"strings"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/fleet"
)

// TestLookWaitsForAResidentPod: on a node with room for one pod, a model
// asked for while the other's pod is inside its residency (used since it
// became ready) gives back nobody and waits, saying for how long, with
// when to look again; once the residency has passed, the pod is given
// back. The rule is the local fleet's (fleet.MakeRoom).
func TestLookWaitsForAResidentPod(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := catalog.Profile{RAMBytes: 4 << 30, CPUCores: 1}
	beta := catalog.Model{Name: "beta", Profiles: []catalog.Profile{p}}
	nodes := []node{{name: "small-1", cpu: 8, mem: 6 << 30, cpuUsed: 1, memUsed: 4 << 30}}
	lookAt := func(now time.Time) fleet.Decision {
		h := holding{node: "small-1", mem: 4 << 30, Holder: fleet.Holder{ID: "alpha-abc", Model: "alpha",
			Class: catalog.ClassStandard, Ready: true, LastUsed: t0.Add(time.Second)}}
		// Ready at t0 after 200 ms of loading, used a second later.
		h.Reside(t0, 200*time.Millisecond, t0.Add(time.Second), fleet.DefaultResidency, now)
		w := roomWant([]holding{h}, p, nodes, beta.Name, now)
		return fleet.MakeRoom(beta, []fleet.Want{w}, &fleet.Kept{}, now)
	}

	o := lookAt(t0.Add(2 * time.Second))
	if len(o.Victims) > 0 || !o.Waits || !o.Until.Equal(t0.Add(fleet.DefaultResidency)) {
		t.Fatalf("inside the residency: victims %v, waits %v, resident until %v; want none given back, waiting until %v",
			podIDs(o.Victims), o.Waits, o.Until, t0.Add(fleet.DefaultResidency))
	}
	if want := "making room on node small-1: waiting: alpha-abc is kept 3s more after its load (residency)"; o.Text != want {
		t.Errorf("it says %q; want %q", o.Text, want)
	}
	o = lookAt(t0.Add(fleet.DefaultResidency))
	if podIDs(o.Victims) != "alpha-abc" || !o.Until.IsZero() || !strings.Contains(o.Text, "giving back alpha-abc") {
		t.Errorf("once the residency has passed: victims %q, resident %v, %q; want alpha-abc given back", podIDs(o.Victims), o.Until, o.Text)
	}
}

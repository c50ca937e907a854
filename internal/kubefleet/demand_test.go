package kubefleet_test

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"modelserve/internal/fleet"
	"modelserve/internal/testkit"
)

// TestKubernetesGivesABurstBack: a model asked for three replicas in a
// burst, then one at a time, is scaled back to one an idle time after the
// burst, as the local fleet scales it (fleet.Demands), though it is never
// idle. Before, its Deployment stayed at three for as long as requests
// came.
func TestKubernetesGivesABurstBack(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	w := startSwapWorld(t, fakeClock(clk))
	f, cat, admin := w.f, w.cat, w.c.Admin
	trio := w.onDemand("trio")
	trio.Profiles[0].RAMBytes = 1 << 30
	trio.Scaling.Max, trio.Scaling.IdleAfter = 3, time.Minute
	cat.Put(trio)
	burst := f.Use("trio", 3, clk.Now())
	testkit.WaitForValue(t, time.Minute, "three ready replicas of trio", func() ([]fleet.Replica, bool) {
		rs := f.Serving("trio")
		return rs, len(rs) == 3
	})
	burst()
	one := f.Use("trio", 1, clk.Now()) // and one at a time from now on
	defer one()
	pass := func() {
		t.Helper()
		if err := f.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	clk.Step(61 * time.Second) // the burst's window ends: its peak is kept one window more
	pass()
	if h := health(f, "trio"); h.Want != 3 {
		t.Errorf("a window after the burst trio wants %d replicas, want 3", h.Want)
	}
	clk.Step(61 * time.Second) // a window without a burst
	pass()
	testkit.WaitForValue(t, time.Minute, "trio's Deployment back at one replica", func() (int32, bool) {
		n := *deploymentOf(t, admin, "trio").Spec.Replicas
		return n, n == 1 && health(f, "trio").Want == 1
	})
}

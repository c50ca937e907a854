package kubefleet_test

import (
	"strings"
	"testing"
	"time"

	"modelserve/internal/fleet"
	"modelserve/internal/kubefleet"
	"modelserve/internal/testkit"
)

// TestKubernetesKeepsHeadroom: the memory --headroom keeps free on the
// local fleet's machine is kept free on each node of a cluster too, by the
// fleet's own rule, although the scheduler counts only what pods request.
// On the node of 6 GB with 1 GB kept, the API and the planner see 5; a
// model of 2 GB asked for beside an idle one of 4 takes that one's room
// rather than the headroom (the scheduler alone would have placed it
// beside); and one of 5.5 GB, which the scheduler would place on the idle
// node, is said to fit on no node, in the local fleet's words, with no
// pod made for it.
func TestKubernetesKeepsHeadroom(t *testing.T) {
	w := startSwapWorld(t, func(o *kubefleet.Options) { o.Headroom = fleet.Headroom{RAM: 1 << 30, Card: 1 << 30} })
	f, admin, ready, scaledTo0 := w.f, w.c.Admin, w.ready, w.scaledTo0
	w.backfillSizes() // gamma is 2 GB

	ns := testkit.WaitForValue(t, time.Minute, "the node", func() ([]fleet.NodeStatus, bool) {
		ns := f.Nodes()
		return ns, len(ns) == 1
	})
	if n := ns[0]; n.RAMBytes != 6<<30 || n.HeadroomBytes != 1<<30 || n.FreeBytes != 5<<30 || n.CardHeadroomBytes != 1<<30 {
		t.Errorf("the node: %+v; want 6 GiB, 1 GiB of it kept and 5 GiB free", n)
	}
	if p := poolOf(f); len(p) != 1 || p[0].ramGB != 5 || p[0].freeRAMGB != 5 {
		t.Errorf("the pool: %+v; want the 5 GB the headroom leaves, all free", p)
	}

	release := f.Use("alpha", 1, time.Now())
	alpha := ready("alpha")
	release()
	useG := f.Use("gamma", 1, time.Now())
	defer useG()
	ready("gamma")
	scaledTo0("alpha")
	if h := health(f, "alpha"); !strings.HasPrefix(h.LastStop, alpha.ID+": given back for gamma, idle") {
		t.Errorf("alpha's last stop %q; want given back for gamma, whose 2 GB beside it were the headroom's", h.LastStop)
	}

	huge := w.onDemand("huge")
	huge.Profiles[0].RAMBytes = 5<<30 + 512<<20
	w.cat.Put(huge)
	useH := f.Use("huge", 1, time.Now())
	defer useH()
	h := testkit.WaitForValue(t, time.Minute, "huge to be unplaceable", func() (fleet.ModelHealth, bool) {
		h := health(f, "huge")
		return h, h.Unplaceable
	})
	want := "no node could ever host it, busy or idle:\nnode small-1: needs 5.9 GB, it has 5.4 GB in all once 1.1 GB is kept free for the system (--headroom)"
	if h.Placement != want || h.HardwareExists {
		t.Errorf("huge's health %+v; want placement %q", h, want)
	}
	if n := *deploymentOf(t, admin, "huge").Spec.Replicas; n != 0 {
		t.Errorf("huge's Deployment asks for %d pods; want none, the scheduler would place it in the headroom", n)
	}
	if rs := f.Serving("gamma"); len(rs) != 1 {
		t.Errorf("gamma serves %+v; want its pod kept, huge fitting nowhere", rs)
	}
}

package kubefleet_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"modelserve/catalog"
	"modelserve/internal/catalogtest"
	"modelserve/internal/fleet"
	"modelserve/internal/ggufgen"
	"modelserve/internal/kubefleet"
	"modelserve/internal/kubetest"
	"modelserve/internal/mirror"
	"modelserve/internal/testkit"
	"modelserve/internal/testlog"
)

// swapWorld is a real control plane with one node that has room for one
// model at a time, a catalog of three models on demand (alpha, beta,
// gamma) and a fleet running over them: the swap tests' common ground.
// Each model's weights are a tiny GGUF model on a mirror the pods fetch
// from, so a pod run here (runEngine) answers with the real engine.
type swapWorld struct {
	t        *testing.T
	c        *kubetest.Cluster
	f        *kubefleet.Fleet
	cat      *catalogtest.Catalog
	onDemand func(name string) catalog.Model
}

// backfillSizes gives the backfill tests their models on the 6 GB node:
// alpha 4 GB as every model starts, beta 5, gamma 2 and delta 1.
func (w *swapWorld) backfillSizes() {
	for _, s := range []struct {
		name string
		gb   int64
	}{{"beta", 5}, {"gamma", 2}, {"delta", 1}} {
		m := w.onDemand(s.name)
		m.Profiles[0].RAMBytes = s.gb << 30
		w.cat.Put(m)
	}
	w.f.Poke()
}

// mirrorToken is what the swap world's pods fetch weights with.
const mirrorToken = "ms_nodes"

// startSwapWorld starts the swap world; set, when given, changes the
// fleet's options (its drain timeout, its clock).
func startSwapWorld(t *testing.T, set ...func(*kubefleet.Options)) *swapWorld {
	t.Helper()
	return startSwapWorldThrough(t, nil, set...)
}

// startSwapWorldThrough is startSwapWorld with the fleet's client to the
// control plane passed through through (nil: as it is), which may also
// ready the cluster before the fleet starts.
func startSwapWorldThrough(t *testing.T, through func(*kubetest.Cluster, kubernetes.Interface) kubernetes.Interface, set ...func(*kubefleet.Options)) *swapWorld {
	t.Helper()
	c := kubetest.Start(t)
	c.AddNode(t, kubetest.Node{Name: "small-1", CPU: 8, Memory: "6Gi"})
	client := c.Client(t, c.Account(t, "../../deploy/rbac.yaml"))
	if through != nil {
		client = through(c, client)
	}
	mirrorDir := t.TempDir()
	mirrorURL := serveMirror(t, mirrorDir)
	// A context the engine lets an answer run to: seconds of writing.
	weights := ggufgen.Bytes(ggufgen.Spec{ContextLength: 8192})
	sum := sha256.Sum256(weights)
	cat := &catalogtest.Catalog{}
	onDemand := func(name string) catalog.Model {
		m := model(mirrorDir, name, catalog.Profile{RAMBytes: 4 << 30, CPUCores: 1})
		m.Scaling = catalog.Scaling{Min: 0, Max: 1, IdleAfter: time.Hour}
		// One slot with a long context: a streamed answer lasts seconds.
		m.Profiles[0].Pool, m.Profiles[0].Slots = 8192, 1
		m.Origin.Files = []catalog.OriginFile{{Path: "tiny-Q8_0.gguf", Bytes: int64(len(weights)), SHA256: hex.EncodeToString(sum[:])}}
		if err := os.MkdirAll(filepath.Dir(m.Source), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(m.Source, weights, 0o644); err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, name := range []string{"alpha", "beta", "gamma"} {
		cat.Put(onDemand(name))
	}
	var logs testlog.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the fleet's log:\n%s", logs.String())
		}
	})
	opts := kubefleet.Options{
		Client: client, Catalog: cat, Namespace: ns, EngineImage: "ghcr.io/ggml-org/llama.cpp:server",
		MirrorURL: mirrorURL, MirrorDir: mirrorDir, MirrorToken: mirrorToken, Resync: 5 * time.Second,
		Log: slog.New(slog.NewTextHandler(&logs, nil)),
		// These are tests of swapping itself, each swap asked for at
		// once: a residency would have every one wait seconds for the
		// model before. TestLookWaitsForAResidentPod tests it.
		Residency: -1,
	}
	for _, set := range set {
		set(&opts)
	}
	f, err := kubefleet.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return &swapWorld{t: t, c: c, f: f, cat: cat, onDemand: onDemand}
}

// serveMirror serves the mirror of dir on loopback, to the pods' token
// only, as modelserve serves /mirror/ to the nodes.
func serveMirror(t *testing.T, dir string) string {
	t.Helper()
	m, err := mirror.New(mirror.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+mirrorToken {
			http.Error(w, "a token is needed", http.StatusUnauthorized)
			return
		}
		m.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// ready waits for name's one ready replica.
func (w *swapWorld) ready(name string) fleet.Replica {
	w.t.Helper()
	type seen struct {
		Replicas []fleet.Replica
		Health   fleet.ModelHealth
	}
	testkit.WaitForValue(w.t, time.Minute, "a ready replica of "+name, func() (seen, bool) {
		rs := w.f.Serving(name)
		return seen{replicasOf(w.f, name), health(w.f, name)}, len(rs) == 1
	})
	return first(w.f.Serving(name))
}

// scaledTo0 waits for name's Deployment to be at 0 with no pod left.
func (w *swapWorld) scaledTo0(name string) {
	w.t.Helper()
	testkit.WaitForValue(w.t, time.Minute, name+" scaled to 0 with no pod left", func() ([]fleet.Replica, bool) {
		rs := replicasOf(w.f, name)
		return rs, *deploymentOf(w.t, w.c.Admin, name).Spec.Replicas == 0 && len(rs) == 0
	})
}

// TestKubernetesSwap is the local fleet's swapping on a real control
// plane: one node with room for one model at a time, and models served on
// demand taking each other's room by the same rule.
func TestKubernetesSwap(t *testing.T) {
	w := startSwapWorld(t)
	f, cat, onDemand, admin, ready, scaledTo0 := w.f, w.cat, w.onDemand, w.c.Admin, w.ready, w.scaledTo0

	release := f.Use("alpha", 1, time.Now())
	alpha := ready("alpha")
	release()

	t.Run("an idle model's pods are room the planner may count", func(t *testing.T) {
		ns := f.Nodes()
		if len(ns) != 1 || len(ns[0].Reclaimable) != 1 || ns[0].Reclaimable[0] != alpha.ID || ns[0].ReclaimableBytes != 4<<30 {
			t.Errorf("the node with alpha idle: %+v; want alpha's pod and its 4 GiB reclaimable", ns)
		}
		if p := poolOf(f); len(p) != 1 || p[0].freeRAMGB != 6 {
			t.Errorf("the pool with alpha idle: %+v; want all 6 GB free to the planner", p)
		}
	})

	t.Run("an idle model on demand is scaled to 0 for another asked for", func(t *testing.T) {
		release := f.Use("beta", 1, time.Now())
		defer release()
		ready("beta")
		// alpha's pod is gone; a new one waits its turn, before gamma's.
		testkit.WaitForValue(t, time.Minute, "alpha's pod given back", func() ([]fleet.Replica, bool) {
			rs := replicasOf(f, "alpha")
			return rs, !slices.ContainsFunc(rs, func(r fleet.Replica) bool { return r.ID == alpha.ID })
		})
		if h := health(f, "alpha"); !strings.HasPrefix(h.LastStop, alpha.ID+": given back for beta, idle for ") {
			t.Errorf("alpha's last stop %q, want its pod given back for beta, idle", h.LastStop)
		}
		if ev := f.Evictions(); len(ev) != 1 || ev[0] != (fleet.Eviction{Model: "alpha", Reason: "swap", Count: 1}) {
			t.Errorf("evictions %+v, want alpha's one swap", ev)
		}
		// The wait ends in the pass that sees beta's pod placed, which
		// may come after the pod is seen ready.
		// Beta's health beside the tally: what the fleet last made of its
		// placement says which pass let the wait go untallied.
		testkit.WaitForValue(t, time.Minute, "beta's one wait for memory tallied", func() (string, bool) {
			w := f.MemoryWaits()
			return fmt.Sprintf("%+v; beta %+v", w, health(f, "beta")), w.Count == 1 && w.Sum > 0
		})
	})

	t.Run("a model answering requests is not scaled down: the other waits for it", func(t *testing.T) {
		releaseBeta := f.Use("beta", 1, time.Now())
		beta := ready("beta")
		releaseGamma := f.Use("gamma", 1, time.Now())
		defer releaseGamma()
		h := testkit.WaitForValue(t, time.Minute, "gamma to wait for beta", func() (fleet.ModelHealth, bool) {
			h := health(f, "gamma")
			return h, strings.Contains(h.Placement, "waiting for "+beta.ID+" to finish the request")
		})
		if h.Unplaceable {
			t.Errorf("gamma waiting for beta's room is unplaceable: %+v", h)
		}
		twoPasses(t, f) // in which beta must stay
		if rs := f.Serving("beta"); len(rs) != 1 || rs[0].ID != beta.ID || *deploymentOf(t, admin, "beta").Spec.Replicas != 1 {
			t.Fatalf("beta, answering, was given back: %+v", rs)
		}
		releaseBeta()
		ready("gamma")
		scaledTo0("beta")
		if h := health(f, "beta"); !strings.Contains(h.LastStop, "given back for gamma") {
			t.Errorf("beta's last stop %q, want given back for gamma", h.LastStop)
		}
	})

	t.Run("with no idle model to give back, the scheduler's words say what holds it", func(t *testing.T) {
		// A pinned model takes gamma's room (gamma is idle now)...
		pinned := onDemand("pinned")
		pinned.Scaling.Min = 1
		cat.Put(pinned)
		f.Poke()
		ready("pinned")
		scaledTo0("gamma")
		// ...and is never given back itself.
		release := f.Use("alpha", 1, time.Now())
		defer release()
		h := testkit.WaitForValue(t, time.Minute, "alpha to be unplaceable", func() (fleet.ModelHealth, bool) {
			h := health(f, "alpha")
			return h, h.Unplaceable
		})
		if !strings.Contains(h.Placement, "Insufficient memory") {
			t.Errorf("alpha's placement %q, want the scheduler's sentence naming memory", h.Placement)
		}
		if len(f.Serving("pinned")) != 1 {
			t.Errorf("the pinned model was given back for alpha")
		}
		if p := poolOf(f); len(p) != 1 || p[0].freeRAMGB != 2 {
			t.Errorf("the pool with the pinned model: %+v; want 2 GB free, its room not the planner's", p)
		}
	})
}

// TestKubernetesSwapOrder is the local fleet's order among models waiting
// for room, on a real control plane: a model asked for again and again
// does not starve a waiting one, one given back keeps its requests'
// place, a request asked after a waiting model's waits behind it, and a
// critical model takes the room of a busy opportunistic one.
func TestKubernetesSwapOrder(t *testing.T) {
	w := startSwapWorld(t)
	f, cat, onDemand, admin, ready, scaledTo0 := w.f, w.cat, w.onDemand, w.c.Admin, w.ready, w.scaledTo0

	t.Run("a model asked for again and again does not starve a waiting one", func(t *testing.T) {
		asked1 := time.Now()
		use1 := f.Use("alpha", 1, asked1)
		alpha := ready("alpha")
		useB := f.Use("beta", 1, asked1.Add(time.Millisecond))
		testkit.WaitForValue(t, time.Minute, "beta to wait for alpha", func() (fleet.ModelHealth, bool) {
			h := health(f, "beta")
			return h, strings.Contains(h.Placement, "waiting for "+alpha.ID)
		})
		use2 := f.Use("alpha", 1, asked1.Add(2*time.Millisecond)) // asked after beta: behind it
		defer use2()
		f.Poke()
		twoPasses(t, f) // in which alpha must stay: its first request came before beta's
		if rs := f.Serving("alpha"); len(rs) != 1 || *deploymentOf(t, admin, "alpha").Spec.Replicas != 1 {
			t.Fatalf("alpha, with a request asked before beta's unanswered, was given back: %+v", rs)
		}
		useG := f.Use("gamma", 1, asked1.Add(3*time.Millisecond)) // asked after alpha's second request
		defer useG()
		use1()
		ready("beta")
		// alpha's pod is gone; a new one waits its turn, before gamma's.
		testkit.WaitForValue(t, time.Minute, "alpha's pod given back", func() ([]fleet.Replica, bool) {
			rs := replicasOf(f, "alpha")
			return rs, !slices.ContainsFunc(rs, func(r fleet.Replica) bool { return r.ID == alpha.ID })
		})
		if h := health(f, "alpha"); !strings.Contains(h.LastStop, "given back for beta once the answers it has end") {
			t.Errorf("alpha's last stop %q; want given back for beta once its answers end", h.LastStop)
		}
		useB()
		// beta is idle: alpha's request, asked before gamma's, goes first.
		ready("alpha")
		if rs := f.Serving("gamma"); len(rs) != 0 {
			t.Errorf("gamma, asked after alpha's waiting request, went before it: %+v", rs)
		}
		use2()
		ready("gamma")
	})

	t.Run("a request asked after a waiting model's takes no pod it waits on", func(t *testing.T) {
		asked1 := time.Now()
		use1 := f.Use("alpha", 1, asked1)
		alpha := ready("alpha")
		hold1, ok := f.Hold(alpha.ID, asked1)
		if !ok {
			t.Fatalf("a ready pod refused a request")
		}
		askedB := asked1.Add(time.Millisecond)
		useB := f.Use("beta", 1, askedB)
		defer useB()
		testkit.WaitForValue(t, time.Minute, "beta to wait for alpha", func() (fleet.ModelHealth, bool) {
			h := health(f, "beta")
			return h, strings.Contains(h.Placement, "waiting for "+alpha.ID)
		})
		// Taken, it would have alpha's pod, given back for beta once the
		// answer asked before beta's ends, drain for this one's too.
		askedLate := askedB.Add(time.Millisecond)
		useLate := f.Use("alpha", 1, askedLate)
		defer useLate()
		if release, ok := f.Hold(alpha.ID, askedLate); ok {
			release()
			t.Errorf("%s took a request asked after beta's, which waits for its room", alpha.ID)
		}
		// One asked before beta's (retried, its arrival kept) still does.
		if release, ok := f.Hold(alpha.ID, asked1); !ok {
			t.Errorf("%s refused a request asked before beta's", alpha.ID)
		} else {
			release()
		}
		hold1()
		use1()
		// In turn: beta, then alpha's later request on alpha's next pod.
		b := ready("beta")
		holdB, ok := f.Hold(b.ID, askedB)
		if !ok {
			t.Fatalf("%s refused beta's request", b.ID)
		}
		holdB()
		useB()
		a2 := ready("alpha")
		release, ok := f.Hold(a2.ID, askedLate)
		if !ok {
			t.Fatalf("%s refused alpha's request, whose turn it is", a2.ID)
		}
		release()
	})

	t.Run("a critical model takes the room of a busy opportunistic one", func(t *testing.T) {
		opp := onDemand("opp")
		opp.Class = catalog.ClassOpportunistic
		opp.Scaling.Min = 1
		crit := onDemand("crit")
		crit.Class = catalog.ClassCritical
		cat.Put(opp)
		cat.Put(crit)
		f.Poke()
		o := ready("opp")
		scaledTo0("gamma")
		useO := f.Use("opp", 1, time.Now()) // answering, and kept by its Min
		defer useO()
		useC := f.Use("crit", 1, time.Now())
		defer useC()
		ready("crit")
		// opp's pod is gone; its Min asks for one that waits for room.
		if rs := replicasOf(f, "opp"); slices.ContainsFunc(rs, func(r fleet.Replica) bool { return r.ID == o.ID }) {
			t.Errorf("opp's pod %s still there with crit serving: %+v", o.ID, rs)
		}
		if h := health(f, "opp"); !strings.Contains(h.LastStop, "stopped to make room for crit, a critical model") {
			t.Errorf("opp's last stop %q; want stopped for crit, a critical model", h.LastStop)
		}
	})
}

// TestKubernetesKeepsRoomForTheFirstAsked is the local fleet's backfill
// rule (fleet.Spare) on a real control plane, on the node of 6 GB: beta
// (5 GB) waits for busy alpha's 4; a model asked for after beta takes of
// the 2 GB free only what beta will never need (1 GB), whichever way
// alpha falls idle.
func TestKubernetesKeepsRoomForTheFirstAsked(t *testing.T) {
	w := startSwapWorld(t)
	f, cat, admin, ready := w.f, w.cat, w.c.Admin, w.ready
	w.backfillSizes()
	// betaWaits has alpha answer, and beta asked for after it, waiting.
	betaWaits := func(t *testing.T) (alpha fleet.Replica, endAlpha, endBeta func()) {
		t.Helper()
		// Beta is asked a millisecond after alpha; a pod's start later,
		// the caller's next request is asked after both.
		askedA := time.Now()
		endAlpha = f.Use("alpha", 1, askedA) // answering from now on
		alpha = ready("alpha")
		endBeta = f.Use("beta", 1, askedA.Add(time.Millisecond))
		testkit.WaitForValue(t, time.Minute, "beta to wait for alpha", func() (fleet.ModelHealth, bool) {
			h := health(f, "beta")
			return h, strings.Contains(h.Placement, "waiting for "+alpha.ID+" to finish the request")
		})
		return alpha, endAlpha, endBeta
	}

	t.Run("a later, smaller model that fits in the free room waits until the earlier one has started", func(t *testing.T) {
		alpha, endAlpha, endBeta := betaWaits(t)
		defer endBeta()
		endGamma := f.Use("gamma", 1, time.Now())
		defer endGamma()
		h := testkit.WaitForValue(t, time.Minute, "gamma to wait behind beta", func() (fleet.ModelHealth, bool) {
			h := health(f, "gamma")
			return h, strings.Contains(h.Placement, "; 1.1 GB of the room is kept for beta, asked for before it")
		})
		if want := "waiting for " + alpha.ID + " to finish the request"; !strings.Contains(h.Placement, want) || h.Unplaceable {
			t.Errorf("gamma's health %+v; want it waiting, not unplaceable, for %s", h, want)
		}
		twoPasses(t, f) // in which gamma must not start
		if rs := replicasOf(f, "gamma"); len(rs) != 0 || *deploymentOf(t, admin, "gamma").Spec.Replicas != 0 {
			t.Fatalf("gamma, asked after beta, took the 2 GB free that beta needs 1 of once alpha is idle: %+v", rs)
		}
		endAlpha()
		ready("beta")
		// Once beta is placed gamma may ask for a pod again, which waits
		// for beta's room: none is on a node.
		if rs := replicasOf(f, "gamma"); slices.ContainsFunc(rs, func(r fleet.Replica) bool { return r.Node != "" }) {
			t.Errorf("gamma had a pod placed before beta started: %+v", rs)
		}
		endBeta()
		ready("gamma")
		endGamma()
		cat.Remove("gamma") // its room is the next case's
		f.Poke()
		testkit.WaitForValue(t, time.Minute, "gamma's pods gone", func() ([]fleet.Replica, bool) {
			rs := replicasOf(f, "gamma")
			return rs, len(rs) == 0
		})
	})

	t.Run("a later model that fits in room the earlier one never needs starts at once", func(t *testing.T) {
		alpha, endAlpha, endBeta := betaWaits(t)
		defer endBeta()
		endDelta := f.Use("delta", 1, time.Now()) // answering from now on
		defer endDelta()
		delta := ready("delta")
		if rs := f.Serving("alpha"); len(rs) != 1 || rs[0].ID != alpha.ID || len(f.Serving("beta")) != 0 {
			t.Fatalf("alpha %+v and beta %+v, with delta placed; want alpha answering and beta waiting still", rs, f.Serving("beta"))
		}
		endAlpha()
		ready("beta")
		if rs := f.Serving("delta"); len(rs) != 1 || rs[0].ID != delta.ID {
			t.Errorf("delta %+v once beta is placed; want %s serving on: beta needs none of its room", rs, delta.ID)
		}
	})
}

// TestKubernetesKeepsRoomGivenBackForTheFirstAsked is the local fleet's
// count of room being given back, on a real control plane, on the node of
// 6 GB: alpha's pod (4 GB), given back for beta (5 GB) once its answer
// ends, is beta's room as it comes back, not the models' asked for after
// beta. gamma (2 GB), asked for next, counts on 1 GB of the 2 free (beta
// keeps the other); delta (1 GB), asked for after gamma, waits instead of
// taking it, as it would were alpha's room anybody's.
func TestKubernetesKeepsRoomGivenBackForTheFirstAsked(t *testing.T) {
	w := startSwapWorld(t)
	f, admin, ready := w.f, w.c.Admin, w.ready
	w.backfillSizes()

	askedA := time.Now()
	endAlpha := f.Use("alpha", 1, askedA)
	alpha := ready("alpha")
	// The answer alpha streams: its pod drains until it ends.
	endAnswer, ok := f.Hold(alpha.ID, askedA)
	if !ok {
		t.Fatalf("a ready pod refused a request")
	}
	defer endAnswer()
	endBeta := f.Use("beta", 1, askedA.Add(time.Millisecond))
	defer endBeta()
	testkit.WaitForValue(t, time.Minute, "beta to wait for alpha", func() (fleet.ModelHealth, bool) {
		h := health(f, "beta")
		return h, strings.Contains(h.Placement, "waiting for "+alpha.ID+" to finish the request")
	})
	endAlpha2 := f.Use("alpha", 1, askedA.Add(2*time.Millisecond)) // asked after beta: behind it
	defer endAlpha2()
	endAlpha()
	testkit.WaitForValue(t, time.Minute, "beta to wait for alpha's pod given back for it", func() (fleet.ModelHealth, bool) {
		h := health(f, "beta")
		return h, strings.Contains(h.Placement, "waiting for "+alpha.ID+" to stop")
	})
	if h := health(f, "alpha"); !strings.Contains(h.LastStop, "given back for beta once the answers it has end") {
		t.Errorf("alpha's last stop %q; want given back for beta once its answers end", h.LastStop)
	}

	endGamma := f.Use("gamma", 1, askedA.Add(3*time.Millisecond))
	defer endGamma()
	testkit.WaitForValue(t, time.Minute, "gamma to wait behind beta", func() (fleet.ModelHealth, bool) {
		h := health(f, "gamma")
		return h, strings.Contains(h.Placement, "waiting behind beta")
	})
	endDelta := f.Use("delta", 1, askedA.Add(4*time.Millisecond))
	defer endDelta()
	h := testkit.WaitForValue(t, time.Minute, "delta to wait for room", func() (fleet.ModelHealth, bool) {
		h := health(f, "delta")
		return h, strings.Contains(h.Placement, "making room on node small-1")
	})
	twoPasses(t, f) // in which delta must not start
	if rs := replicasOf(f, "delta"); len(rs) != 0 || *deploymentOf(t, admin, "delta").Spec.Replicas != 0 {
		t.Fatalf("delta, asked after gamma, took the 1 GB free that gamma counts on while alpha's pod, given back for beta, drains (placement %q): %+v",
			h.Placement, rs)
	}
	if h := health(f, "delta"); !strings.Contains(h.Placement, "waiting behind beta, gamma, asked for before it") || h.Unplaceable {
		t.Errorf("delta's health %+v; want it waiting behind beta and gamma, not unplaceable", h)
	}

	// alpha's answer ends: its room is beta's. gamma then waits for busy
	// beta, which gives it back more than it needs: the 1 GB left is
	// room gamma never needs, and delta takes it.
	endAnswer()
	ready("beta")
	ready("delta")
	if rs := f.Serving("gamma"); len(rs) != 0 {
		t.Errorf("gamma serving %+v with busy beta holding its room", rs)
	}
}

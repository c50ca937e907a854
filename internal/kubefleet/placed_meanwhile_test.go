package kubefleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"modelserve/internal/kubetest"
	"modelserve/internal/testkit"
)

// TestKubernetesAPodPlacedDuringAPassIsPlaced: a pass over a model reads
// its pods, then calls the API server, which takes a while; the scheduler
// may place the model's pod, turned away before, in that while. The pass
// says the model placed, and tallies its wait for memory: not the
// scheduler's old refusal, with its room now taken by that very pod.
//
// The while is made certain: alpha's pod, given back for beta, is kept
// by a finalizer of the test's, so that the scheduler turns beta's pod
// away; the pass over beta that sees it turned away lets alpha's pod go
// as it writes beta's Service, and goes on once the scheduler has placed
// beta's pod.
func TestKubernetesAPodPlacedDuringAPassIsPlaced(t *testing.T) {
	const finalizer = "modelserve.test/keep"
	var armed, let atomic.Bool
	var admin kubernetes.Interface
	podsOf := func(ctx context.Context, model string) []corev1.Pod {
		d := deploymentOf(t, admin, model)
		l, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(d.Spec.Selector.MatchLabels).String()})
		if err != nil {
			t.Error(err)
			return nil
		}
		return l.Items
	}
	keep := func(ctx context.Context, pod string, on bool) {
		patch := `{"metadata":{"finalizers":null}}`
		if on {
			patch = `{"metadata":{"finalizers":["` + finalizer + `"]}}`
		}
		if _, err := admin.CoreV1().Pods(ns).Patch(ctx, pod, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	}
	var alphaPod string
	hook := func(ctx context.Context, model string) {
		if !armed.Load() || model != "beta" || let.Load() {
			return
		}
		turnedAway := false
		for _, p := range podsOf(ctx, "beta") {
			for _, c := range p.Status.Conditions {
				turnedAway = turnedAway || p.Spec.NodeName == "" && c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable
			}
		}
		if !turnedAway || !let.CompareAndSwap(false, true) {
			return
		}
		keep(ctx, alphaPod, false)
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			for _, p := range podsOf(ctx, "beta") {
				if p.Spec.NodeName != "" {
					// For the fleet's cache to see it too: this runs in
					// the fleet's own call, where the test can neither
					// ask the fleet nor fail with Fatal.
					time.Sleep(500 * time.Millisecond)
					return
				}
			}
		}
		t.Error("the scheduler did not place beta's pod once alpha's went")
	}
	w := startSwapWorldThrough(t, func(_ *kubetest.Cluster, c kubernetes.Interface) kubernetes.Interface { return hookedClient{c, hook} })
	admin = w.c.Admin
	f := w.f

	release := f.Use("alpha", 1, time.Now())
	alphaPod = w.ready("alpha").ID
	release()
	keep(context.Background(), alphaPod, true)
	t.Cleanup(func() { keep(context.Background(), alphaPod, false) })

	armed.Store(true)
	release = f.Use("beta", 1, time.Now())
	defer release()
	w.ready("beta")
	if !let.Load() {
		t.Fatal("no pass over beta saw its pod turned away while alpha's was kept")
	}
	testkit.WaitForValue(t, time.Minute, "beta's one wait for memory tallied", func() (string, bool) {
		m := f.MemoryWaits()
		return fmt.Sprintf("%+v; beta %+v", m, health(f, "beta")), m.Count == 1 && m.Sum > 0
	})
}

// hookedClient is a client to the control plane whose writes of a
// Service call hook first, with the model the Service is of.
type hookedClient struct {
	kubernetes.Interface
	hook func(ctx context.Context, model string)
}

func (c hookedClient) CoreV1() typedcorev1.CoreV1Interface {
	return hookedCore{c.Interface.CoreV1(), c.hook}
}

type hookedCore struct {
	typedcorev1.CoreV1Interface
	hook func(ctx context.Context, model string)
}

func (c hookedCore) Services(namespace string) typedcorev1.ServiceInterface {
	return hookedServices{c.CoreV1Interface.Services(namespace), c.hook}
}

type hookedServices struct {
	typedcorev1.ServiceInterface
	hook func(ctx context.Context, model string)
}

func (s hookedServices) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*corev1.Service, error) {
	var svc corev1.Service
	if json.Unmarshal(data, &svc) == nil {
		s.hook(ctx, svc.Annotations["modelserve.io/model"])
	}
	return s.ServiceInterface.Patch(ctx, name, pt, data, opts, sub...)
}

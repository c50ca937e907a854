package kubefleet_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"modelserve/internal/fleet"
	"modelserve/internal/kubefleet"
)

// kubeFleet is the fleet as modelserve runs it on a cluster: the one
// controller (fleet.New) over the cluster's backend.
type kubeFleet struct {
	*fleet.Fleet
	backend *kubefleet.Backend
}

// Synced is closed once the fleet's Run has read the cluster.
func (k *kubeFleet) Synced() <-chan struct{} { return k.backend.Synced() }

// newKubeFleet is the fleet over the backend of opts, its parks kept in
// the cluster, looking every second; set changes the controller's
// options (its drain timeout, its clock, its residency).
func newKubeFleet(t testing.TB, opts kubefleet.Options, set ...func(*fleet.Options)) *kubeFleet {
	t.Helper()
	kb, err := kubefleet.NewBackend(opts)
	if err != nil {
		t.Fatal(err)
	}
	fo := fleet.Options{Catalog: opts.Catalog, Backend: kb.Attach, Parks: kb.Parks(), Log: opts.Log, Interval: time.Second}
	for _, set := range set {
		set(&fo)
	}
	f, err := fleet.New(fo)
	if err != nil {
		t.Fatal(err)
	}
	return &kubeFleet{Fleet: f, backend: kb}
}

// podOf is the pod answering for replica r: the one at its endpoint's
// address (the controller names a replica, its Deployment's ReplicaSet
// its pod).
func podOf(t testing.TB, admin kubernetes.Interface, r fleet.Replica) *corev1.Pod {
	t.Helper()
	pods, err := admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pods.Items {
		if p.Status.PodIP != "" && strings.Contains(r.Endpoint, "//"+p.Status.PodIP+":") {
			return &pods.Items[i]
		}
	}
	t.Fatalf("no pod answers for %s at %q", r.ID, r.Endpoint)
	return nil
}

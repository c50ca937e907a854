package kubefleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"modelserve/internal/catalogtest"
	"modelserve/internal/kubefleet"
)

// clusterOf is n nodes of the shapes a kwok cluster has (CPU nodes, and
// one in five with an L4), each running a pod of some other workload, and
// 20 pods of served models on the first nodes: what the pool is read from.
func clusterOf(n int) []runtime.Object {
	objs := make([]runtime.Object, 0, 2*n+20)
	for i := range n {
		res := corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("128Gi"),
			corev1.ResourcePods: resource.MustParse("110"),
		}
		labels := map[string]string{"kubernetes.io/hostname": fmt.Sprintf("node-%04d", i), "type": "kwok"}
		if i%5 == 1 {
			res["nvidia.com/gpu"] = resource.MustParse("1")
			labels["nvidia.com/gpu.product"] = "NVIDIA-L4"
		}
		name := fmt.Sprintf("node-%04d", i)
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Status: corev1.NodeStatus{Capacity: res, Allocatable: res}})
		objs = append(objs, pod("kube-system", "agent-"+name, name, "100m", "128Mi", nil))
	}
	for i := range 20 {
		objs = append(objs, pod(ns, fmt.Sprintf("model-%02d", i), fmt.Sprintf("node-%04d", i%n), "2", "4Gi",
			map[string]string{"app.kubernetes.io/managed-by": "modelserve"}))
	}
	return objs
}

func pod(namespace, name, node, cpu, mem string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// BenchmarkPoolAtScale reads the pool and the fleet's nodes from the
// informers' caches and encodes them, as GET /api/v1/nodes does, for a
// cluster of 2 nodes and of 1,000; the 1,000-node figure is also reported
// beside the 2-node one measured in this run (x-of-2). The target is under
// 20 ms for the request at 1,000 nodes.
func BenchmarkPoolAtScale(b *testing.B) {
	var at2 float64
	for _, n := range []int{2, 1000} {
		f := newKubeFleet(b, kubefleet.Options{
			Client: fake.NewClientset(clusterOf(n)...), Catalog: &catalogtest.Catalog{}, Namespace: ns,
			EngineImage: "ghcr.io/ggml-org/llama.cpp:server", MirrorURL: "http://modelserve.modelserve.svc:8080/",
			MirrorDir: b.TempDir(),
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		select {
		case <-f.Synced():
		case err := <-done:
			b.Fatalf("Run: %v", err)
		case <-time.After(time.Minute):
			b.Fatal("the caches did not sync in a minute")
		}
		if got := len(f.Pool()); got != n {
			b.Fatalf("the pool has %d nodes; the cluster has %d", got, n)
		}
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			start := time.Now()
			for b.Loop() {
				if _, err := json.Marshal(map[string]any{"nodes": f.Pool(), "fleet": f.Nodes()}); err != nil {
					b.Fatal(err)
				}
			}
			ms := float64(time.Since(start).Microseconds()) / 1000 / float64(b.N)
			b.ReportMetric(ms, "ms/read")
			if n == 2 {
				at2 = ms
			} else if at2 > 0 {
				b.ReportMetric(ms/at2, "x-of-2")
			}
		})
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Run: %v", err)
		}
	}
}

package kubetest_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"modelserve/internal/kubetest"
)

// TestADeletedPodsContainersAreStopped: as a kubelet does, deleting a pod
// that RunPod runs sends its containers SIGTERM, so a test of what a
// deletion does to the answers in flight sees the process go, not live on
// to the end of the test.
func TestADeletedPodsContainersAreStopped(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep program here")
	}
	c := kubetest.Start(t)
	c.AddNode(t, kubetest.Node{Name: "node-1", CPU: 2, Memory: "2Gi"})
	grace := int64(2)
	pods := c.Admin.CoreV1().Pods("default")
	ctx := context.Background()
	pod, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper"},
		Spec: corev1.PodSpec{NodeName: "node-1", TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "sleep", Image: "sleeper", Args: []string{"6173"}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for pod.Status.PodIP == "" {
		if time.Now().After(deadline) {
			t.Fatal("the pod got no address within a minute")
		}
		time.Sleep(100 * time.Millisecond)
		if pod, err = pods.Get(ctx, "sleeper", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c.RunPod(t, pod, map[string]kubetest.Image{"sleeper": {Entrypoint: sleep}})
	if !running("6173") {
		t.Fatal("the pod's container is not running after RunPod")
	}
	if err := pods.Delete(ctx, "sleeper", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for running("6173") {
		if time.Now().After(deadline) {
			t.Fatal("the container of a deleted pod still runs 10 s later")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// running is whether a process runs here with arg as its last argument.
func running(arg string) bool {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmdlines {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if bytes.HasSuffix(bytes.TrimRight(b, "\x00"), []byte("\x00"+arg)) {
			return true
		}
	}
	return false
}

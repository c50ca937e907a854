package kubetest_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// TestKubeletRunsEveryPod: under a Kubelet, every pod placed on a node
// runs here, its init container to its end first; the pod turns Ready
// only once its container runs, a container that exits is started again
// with its restart count, exit code and last words where the fleet reads
// them, and a deleted pod's containers are stopped before the pod goes.
func TestKubeletRunsEveryPod(t *testing.T) {
	sleep, err1 := exec.LookPath("sleep")
	sh, err2 := exec.LookPath("sh")
	if err1 != nil || err2 != nil {
		t.Skip("no sleep or sh program here")
	}
	c := kubetest.StartRunning(t)
	c.AddNode(t, kubetest.Node{Name: "node-1", CPU: 2, Memory: "2Gi"})
	c.AddNode(t, kubetest.Node{Name: "node-2", CPU: 2, Memory: "2Gi"})
	c.Kubelet(t, map[string]kubetest.Image{"sleeper": {Entrypoint: sleep}, "shell": {Entrypoint: sh, Path: "/usr/bin:/bin"}})
	pods := c.Admin.CoreV1().Pods("default")
	ctx := context.Background()
	grace := int64(2)
	create := func(name, node string, init []string, args []string) {
		t.Helper()
		spec := corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: &grace,
			Volumes:    []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Containers: []corev1.Container{{Name: "main", Image: "shell", Args: args, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}}}
		if init != nil {
			spec.InitContainers = []corev1.Container{{Name: "first", Image: "shell", Args: init,
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}}
		}
		if _, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(name, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err == nil && ok(p) {
				return p
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod %s: %s did not happen within 30 s: %+v", name, what, p.Status)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	ready := func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	}

	// The init container writes what the container waits for: the
	// container only starts once the init container has ended.
	create("steady", "node-1", []string{"-c", "sleep 1; echo 7291 > /data/token"}, []string{"-c", "exec " + sleep + " $(cat /data/token)"})
	create("other", "node-2", nil, []string{"-c", "exec " + sleep + " 7292"})
	p := wait("steady", "Ready", ready)
	if p.Status.Phase != corev1.PodRunning || len(p.Status.InitContainerStatuses) != 1 ||
		p.Status.InitContainerStatuses[0].State.Terminated == nil || p.Status.InitContainerStatuses[0].State.Terminated.ExitCode != 0 {
		t.Errorf("steady is Ready with status %+v, want Running with its init container ended well", p.Status)
	}
	if !running("7291") {
		t.Error("steady is Ready but its container does not run the init container's word")
	}
	wait("other", "Ready", ready)
	if !running("7292") {
		t.Error("the pod on the second node does not run")
	}

	create("crashing", "node-1", nil, []string{"-c", "echo the engine is out of memory; exit 3"})
	p = wait("crashing", "a restart", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 2
	})
	cs := p.Status.ContainerStatuses[0]
	if last := cs.LastTerminationState.Terminated; last == nil || last.ExitCode != 3 || !strings.Contains(last.Message, "the engine is out of memory") {
		t.Errorf("the crashed container's last termination %+v, want exit 3 with its last words", cs.LastTerminationState)
	}
	if ready(p) {
		t.Error("a pod whose container keeps exiting is Ready")
	}
	wait("crashing", "CrashLoopBackOff", func(p *corev1.Pod) bool {
		s := p.Status.ContainerStatuses
		return len(s) == 1 && s[0].State.Waiting != nil && s[0].State.Waiting.Reason == "CrashLoopBackOff"
	})

	if err := pods.Delete(ctx, "steady", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := pods.Get(ctx, "steady", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a deleted pod is still there 10 s later")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if running("7291") {
		t.Error("the deleted pod is gone but its container still runs")
	}
	if !running("7292") {
		t.Error("deleting one pod stopped another's container")
	}
}

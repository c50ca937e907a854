package kubetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kwok plays a node's kubelet as far as the API sees it (a pod is
// scheduled, gets an address, turns Running and Ready), but runs nothing.
// RunPod plays the rest for one pod: its containers run as processes on
// this machine, so what they do with their spec (fetch the weights, load
// them, answer on the pod's address) is tested for real.

// Image is what RunPod runs for a container image: Entrypoint is the
// program started when the container gives no command (its args follow);
// Path is where a command the container names is looked up.
type Image struct {
	Entrypoint string
	Path       string
}

// Busybox is a folder holding busybox's applets and nothing else, as a
// busybox image's PATH: a script run with it uses busybox's sh, wget and
// sha256sum, not this machine's. Without busybox it skips t (fails it
// under make test, which installs busybox).
func Busybox(t testing.TB) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		missing(t, "busybox is not installed (apt-get install busybox, or make kube): the weights are fetched in busybox's sh and wget, as in the fetch image")
	}
	bin := t.TempDir()
	for _, applet := range []string{"sh", "wget", "sha256sum", "wc", "mkdir", "mv", "rm", "dirname", "cat", "ls"} {
		if err := os.Symlink(bb, filepath.Join(bin, applet)); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

// RunPod runs pod's init containers one after the other to their end
// (failing t when one fails, with its output), then its containers, which
// are stopped when the pod is deleted (SIGTERM, then SIGKILL after its
// grace period, as a kubelet stops them) or when t ends. images says what each image is here.
//
// What differs from a node is made to fit this machine, and nothing else
// is touched: each volume is a folder of its own (emptyDir), and a
// container's mount path is replaced by that folder wherever its args and
// environment name it; a container listening on every address of its pod
// (0.0.0.0) listens on the pod's own, since every pod here shares the
// machine's network. Environment variables from Secrets are read with the
// admin client, as the kubelet reads them.
func (c *Cluster) RunPod(t testing.TB, pod *corev1.Pod, images map[string]Image) {
	t.Helper()
	if pod.Status.PodIP == "" {
		t.Fatalf("pod %s has no address yet", pod.Name)
	}
	volumes := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir == nil {
			t.Fatalf("pod %s: volume %s is not an emptyDir, which is all RunPod gives", pod.Name, v.Name)
		}
		volumes[v.Name] = t.TempDir()
	}
	for _, ctr := range pod.Spec.InitContainers {
		cmd, err := c.command(context.Background(), pod, ctr, images, volumes, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("pod %s: init container %s failed (%v):\n%s", pod.Name, ctr.Name, err, out)
		}
	}
	for _, ctr := range pod.Spec.Containers {
		cmd, err := c.command(context.Background(), pod, ctr, images, volumes, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		logf, err := os.Create(filepath.Join(t.TempDir(), ctr.Name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			logf.Close()
			t.Fatalf("pod %s: starting container %s: %v", pod.Name, ctr.Name, err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		grace := gracePeriod(pod)
		var once sync.Once
		stop := func(grace time.Duration) { once.Do(func() { stopGroup(cmd, done, grace) }) }
		// As a kubelet does, a pod being deleted has its containers sent
		// SIGTERM, and SIGKILL once its grace period has passed: a test of
		// what a deletion does to the answers in flight sees the engine go.
		watching := make(chan struct{})
		go func() {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-watching:
					return
				case <-done:
					return
				case <-tick.C:
				}
				p, err := c.Admin.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) || err == nil && (p.DeletionTimestamp != nil || p.UID != pod.UID) {
					stop(grace)
					return
				}
			}
		}()
		t.Cleanup(func() {
			defer logf.Close()
			close(watching)
			stop(10 * time.Second)
			if t.Failed() {
				t.Logf("pod %s, container %s's last lines:\n%s", pod.Name, ctr.Name, tail(logf.Name(), 15))
			}
		})
	}
}

// command is container ctr of pod as a process here, with home as its
// HOME. A Secret its environment names that does not exist yet is waited
// for (secretWait at most), as a kubelet holds a container back until it
// can read it.
func (c *Cluster) command(ctx context.Context, pod *corev1.Pod, ctr corev1.Container, images map[string]Image, volumes map[string]string, home string) (*exec.Cmd, error) {
	img, ok := images[ctr.Image]
	if !ok {
		return nil, fmt.Errorf("pod %s: container %s runs image %s, which the test did not say how to run", pod.Name, ctr.Name, ctr.Image)
	}
	local := func(s string) string {
		for _, m := range ctr.VolumeMounts {
			s = strings.ReplaceAll(s, m.MountPath, volumes[m.Name])
		}
		return s
	}
	var argv []string
	switch {
	case len(ctr.Command) > 0:
		prog := ctr.Command[0]
		if !strings.Contains(prog, "/") {
			prog = filepath.Join(img.Path, prog)
		}
		argv = append([]string{prog}, ctr.Command[1:]...)
	case img.Entrypoint != "":
		argv = []string{img.Entrypoint}
	default:
		return nil, fmt.Errorf("pod %s: container %s gives no command and image %s has no entrypoint", pod.Name, ctr.Name, ctr.Image)
	}
	for _, a := range ctr.Args {
		if a == "0.0.0.0" {
			a = pod.Status.PodIP
		}
		argv = append(argv, local(a))
	}
	env := []string{"PATH=" + img.Path, "HOME=" + home}
	for _, e := range ctr.Env {
		v := e.Value
		if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
			s, err := c.secret(ctx, pod.Namespace, ref.SecretKeyRef.Name)
			if err != nil {
				return nil, fmt.Errorf("pod %s: container %s's %s is from Secret %s: %w", pod.Name, ctr.Name, e.Name, ref.SecretKeyRef.Name, err)
			}
			v = string(s.Data[ref.SecretKeyRef.Key])
		}
		env = append(env, e.Name+"="+local(v))
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	return cmd, nil
}

// secretWait bounds the wait for a Secret a container's environment names.
const secretWait = 30 * time.Second

// secret reads Secret name with the admin client, as the kubelet reads
// it, waiting secretWait at most for it to be written.
func (c *Cluster) secret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	ctx, cancel := context.WithTimeout(ctx, secretWait)
	defer cancel()
	for {
		s, err := c.Admin.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil || !apierrors.IsNotFound(err) {
			return s, err
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return nil, err
		}
	}
}

// stopGroup stops a container's process group as a kubelet stops a
// container: SIGTERM, then SIGKILL once grace has passed; done is closed
// when the process has been waited for.
func stopGroup(cmd *exec.Cmd, done <-chan struct{}, grace time.Duration) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// gracePeriod is how long pod's containers have between SIGTERM and
// SIGKILL: its terminationGracePeriodSeconds, 30 s (the API's default)
// when unset.
func gracePeriod(pod *corev1.Pod) time.Duration {
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return 30 * time.Second
}

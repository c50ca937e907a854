package kubetest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// Kubelet plays the kubelet of every node of a cluster started with
// StartRunning, for every pod placed on one: its init containers run one
// after the other to their end, then its containers, as processes here
// (as RunPod runs them), and what they do is written to the pod's status
// where a kubelet writes it: a failed container's exit code, restart
// count and termination message (its log's end, as FallbackToLogsOnError
// gives it), CrashLoopBackOff while it waits to be started again, its
// readiness from its readiness probe, and the pod's Initialized,
// ContainersReady and Ready conditions and its phase. A pod being deleted
// has its containers sent SIGTERM, then SIGKILL after its grace period,
// and is removed once they have stopped. Everything it started is stopped
// when the test ends.
//
// What differs from a node's kubelet, to keep a test short: a container
// is started again after 1 s, doubled for each failure up to 8 s (a
// kubelet begins at 10 s, up to 5 minutes); readiness is probed every
// half second whatever the probe's period (nothing the fleet reads
// depends on it), and no liveness probe restarts a container.
type Kubelet struct {
	c      *Cluster
	images map[string]Image
	dir    string
	ctx    context.Context
	wg     sync.WaitGroup

	mu   sync.Mutex
	pods map[types.UID]*podRun
}

// Kubelet starts playing the kubelet of the cluster's nodes (StartRunning's
// cluster), with images saying how to run each image, until t ends.
func (c *Cluster) Kubelet(t testing.TB, images map[string]Image) *Kubelet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	k := &Kubelet{c: c, images: images, dir: t.TempDir(), ctx: ctx, pods: map[types.UID]*podRun{}}
	factory := informers.NewSharedInformerFactory(c.Admin, 0)
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    k.see,
		UpdateFunc: func(_, o any) { k.see(o) },
		DeleteFunc: k.gone,
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
		k.wg.Wait()
		if t.Failed() {
			k.mu.Lock()
			defer k.mu.Unlock()
			for _, r := range k.pods {
				for _, log := range r.logs() {
					t.Logf("pod %s, container %s's last lines:\n%s", r.pod.Name, strings.TrimSuffix(filepath.Base(log), ".log"), tail(log, 15))
				}
			}
		}
	})
	wait, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	if !cache.WaitForCacheSync(wait.Done(), inf.HasSynced) {
		t.Fatal("the kubelet could not list the cluster's pods within 30 s")
	}
	return k
}

// see runs a pod newly placed and given its address, and stops one whose
// deletion has begun; one deleted before it ran is removed at once.
func (k *Kubelet) see(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	r := k.pods[p.UID]
	if r == nil && p.DeletionTimestamp != nil {
		if k.ctx.Err() == nil {
			k.wg.Add(1)
			go func() {
				defer k.wg.Done()
				k.remove(p)
			}()
		}
		return
	}
	if r == nil {
		if p.Status.PodIP == "" || k.ctx.Err() != nil {
			return // kwok gives it its address first
		}
		r = &podRun{k: k, pod: p.DeepCopy(), deleting: make(chan struct{}), dir: filepath.Join(k.dir, string(p.UID))}
		k.pods[p.UID] = r
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			r.run()
		}()
	}
	if p.DeletionTimestamp != nil {
		r.delete()
	}
}

// gone stops the containers of a pod removed without a graceful deletion.
func (k *Kubelet) gone(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if p, ok := obj.(*corev1.Pod); ok {
		k.mu.Lock()
		r := k.pods[p.UID]
		k.mu.Unlock()
		if r != nil {
			r.delete()
		}
	}
}

// podRun is one pod as the Kubelet runs it.
type podRun struct {
	k        *Kubelet
	pod      *corev1.Pod
	dir      string
	deleting chan struct{}
	once     sync.Once

	mu     sync.Mutex
	inits  []corev1.ContainerStatus
	ctrs   []corev1.ContainerStatus
	logged []string
}

func (r *podRun) delete() { r.once.Do(func() { close(r.deleting) }) }

func (r *podRun) logs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.logged...)
}

// stopped is closed when the pod is being deleted or the test ends.
func (r *podRun) stopped() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		select {
		case <-r.deleting:
		case <-r.k.ctx.Done():
		}
	}()
	return ch
}

func (r *podRun) run() {
	stop := r.stopped()
	p := r.pod
	for _, c := range p.Spec.InitContainers {
		r.inits = append(r.inits, waiting(c, "PodInitializing"))
	}
	for _, c := range p.Spec.Containers {
		r.ctrs = append(r.ctrs, waiting(c, "PodInitializing"))
	}
	volumes := map[string]string{}
	for _, v := range p.Spec.Volumes {
		volumes[v.Name] = filepath.Join(r.dir, "volumes", v.Name)
		if err := os.MkdirAll(volumes[v.Name], 0o755); err != nil {
			r.fail(err)
			return
		}
	}
	r.report()
	for i, c := range p.Spec.InitContainers {
		if !r.initContainer(i, c, volumes, stop) {
			r.end()
			return
		}
	}
	var wg sync.WaitGroup
	for i, c := range p.Spec.Containers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.container(i, c, volumes, stop)
		}()
	}
	wg.Wait()
	r.end()
}

// initContainer runs init container i until it ends well (true), started
// again after each failure, or the pod is stopped (false).
func (r *podRun) initContainer(i int, c corev1.Container, volumes map[string]string, stop <-chan struct{}) bool {
	for restarts := 0; ; restarts++ {
		r.set(&r.inits[i], func(s *corev1.ContainerStatus) {
			s.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
		})
		code, msg, ok := r.runOnce(c, volumes, stop, nil)
		if !ok {
			return false
		}
		if code == 0 {
			r.set(&r.inits[i], func(s *corev1.ContainerStatus) {
				s.Ready = true
				s.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: metav1.Now()}}
			})
			return true
		}
		if !r.backOff(&r.inits[i], code, msg, restarts, stop) {
			return false
		}
	}
}

// container runs container i, started again each time it exits, until the
// pod is stopped.
func (r *podRun) container(i int, c corev1.Container, volumes map[string]string, stop <-chan struct{}) {
	for restarts := 0; ; restarts++ {
		started := metav1.Now()
		r.set(&r.ctrs[i], func(s *corev1.ContainerStatus) {
			s.Ready, s.Started = false, ptrTo(true)
			s.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}
		})
		probing := func(done <-chan struct{}) { r.probe(i, c, done) }
		code, msg, ok := r.runOnce(c, volumes, stop, probing)
		if !ok || !r.backOff(&r.ctrs[i], code, msg, restarts, stop) {
			return
		}
	}
}

// backOff says a container exited with code (its last words msg) and
// waits before it is started again: false when the pod is stopped
// meanwhile.
func (r *podRun) backOff(s *corev1.ContainerStatus, code int32, msg string, restarts int, stop <-chan struct{}) bool {
	reason := "Error"
	if code == 0 {
		reason, msg = "Completed", ""
	}
	r.set(s, func(s *corev1.ContainerStatus) {
		s.Ready, s.Started = false, ptrTo(false)
		s.RestartCount++
		s.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: code, Reason: reason, Message: msg, FinishedAt: metav1.Now()}}
		s.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off restarting failed container %s", s.Name)}}
	})
	select {
	case <-stop:
		return false
	case <-time.After(min(time.Second<<min(restarts, 3), 8*time.Second)):
		return true
	}
}

// runOnce runs container c once, to its end or until the pod is stopped
// (ok false: its process was stopped as a kubelet stops it). probing, when
// set, runs beside the process until it ends. msg is the end of its log
// when it failed.
func (r *podRun) runOnce(c corev1.Container, volumes map[string]string, stop <-chan struct{}, probing func(done <-chan struct{})) (code int32, msg string, ok bool) {
	home := filepath.Join(r.dir, "home", c.Name)
	if err := os.MkdirAll(home, 0o755); err != nil {
		return 1, err.Error(), true
	}
	cmd, err := r.k.c.command(r.k.ctx, r.pod, c, r.k.images, volumes, home)
	if err != nil {
		// A kubelet that cannot make the container says why and tries again.
		return 1, err.Error(), true
	}
	log := filepath.Join(r.dir, c.Name+".log")
	logf, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 1, err.Error(), true
	}
	defer logf.Close()
	r.mu.Lock()
	if len(r.logged) == 0 || r.logged[len(r.logged)-1] != log {
		r.logged = append(r.logged, log)
	}
	r.mu.Unlock()
	from, _ := logf.Seek(0, 2)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return 128, err.Error(), true
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	if probing != nil {
		go probing(done)
	}
	select {
	case <-done:
	case <-stop:
		grace := gracePeriod(r.pod)
		if r.k.ctx.Err() != nil {
			grace = min(grace, 10*time.Second)
		}
		stopGroup(cmd, done, grace)
		return 0, "", false
	}
	code = exitCode(cmd.ProcessState)
	if code != 0 {
		msg = lastBytes(log, from, 2048)
	}
	return code, msg, true
}

// probe asks container i's readiness probe every half second while the
// container runs (done), and says its readiness as it changes: ready at
// its first success, not ready after FailureThreshold failures in a row.
// A container with no probe is ready once started.
func (r *podRun) probe(i int, c corev1.Container, done <-chan struct{}) {
	get := c.ReadinessProbe
	if get == nil || get.HTTPGet == nil {
		r.set(&r.ctrs[i], func(s *corev1.ContainerStatus) { s.Ready = true })
		return
	}
	url := "http://" + r.pod.Status.PodIP + ":" + strconv.Itoa(get.HTTPGet.Port.IntValue()) + get.HTTPGet.Path
	client := &http.Client{Timeout: time.Duration(max(get.TimeoutSeconds, 1)) * time.Second}
	threshold := int(max(get.FailureThreshold, 1))
	ready, misses := false, 0
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		ok := false
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			ok = resp.StatusCode >= 200 && resp.StatusCode < 400
		}
		switch {
		case ok:
			misses = 0
		default:
			misses++
		}
		if now := ok || (ready && misses < threshold); now != ready {
			ready = now
			select {
			case <-done:
				return // it exited meanwhile: its exit says the rest
			default:
			}
			r.set(&r.ctrs[i], func(s *corev1.ContainerStatus) { s.Ready = now })
		}
	}
}

// set changes a container's status and writes the pod's.
func (r *podRun) set(s *corev1.ContainerStatus, change func(*corev1.ContainerStatus)) {
	r.mu.Lock()
	change(s)
	r.mu.Unlock()
	r.report()
}

// fail says the pod could not be run at all.
func (r *podRun) fail(err error) {
	r.mu.Lock()
	for i := range r.inits {
		r.inits[i].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerError", Message: err.Error()}}
	}
	r.mu.Unlock()
	r.report()
	<-r.stopped()
	r.end()
}

// end removes a pod being deleted once its containers have stopped, as a
// kubelet does; at the test's end it leaves the cluster alone.
func (r *podRun) end() {
	select {
	case <-r.deleting:
	default:
		return
	}
	if r.k.ctx.Err() != nil {
		return
	}
	r.k.remove(r.pod)
}

// remove deletes pod p, whose containers have stopped (or never ran), for
// good: the end of its graceful deletion, as a kubelet ends it.
func (k *Kubelet) remove(p *corev1.Pod) {
	ctx, cancel := context.WithTimeout(k.ctx, 10*time.Second)
	defer cancel()
	uid := p.UID
	err := k.c.Admin.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptrTo(int64(0)), Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && k.ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "kubetest: removing pod %s once its containers stopped: %v\n", p.Name, err)
	}
}

// report writes the pod's status as its containers' say it, until the
// pod is gone or being deleted; the fields kwok wrote (its addresses) and
// the scheduler's condition are kept.
func (r *podRun) report() {
	if r.k.ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	inits := cloneStatuses(r.inits)
	ctrs := cloneStatuses(r.ctrs)
	r.mu.Unlock()
	initialized := true
	for _, s := range inits {
		initialized = initialized && s.State.Terminated != nil && s.State.Terminated.ExitCode == 0
	}
	ready := initialized
	for _, s := range ctrs {
		ready = ready && s.Ready
	}
	phase := corev1.PodPending
	if initialized {
		phase = corev1.PodRunning
	}
	pods := r.k.c.Admin.CoreV1().Pods(r.pod.Namespace)
	ctx, cancel := context.WithTimeout(r.k.ctx, 10*time.Second)
	defer cancel()
	for range 5 {
		p, err := pods.Get(ctx, r.pod.Name, metav1.GetOptions{})
		if err != nil || p.UID != r.pod.UID || p.DeletionTimestamp != nil {
			return
		}
		p.Status.Phase = phase
		if p.Status.StartTime == nil {
			p.Status.StartTime = ptrTo(metav1.Now())
		}
		p.Status.InitContainerStatuses, p.Status.ContainerStatuses = inits, ctrs
		setCondition(p, corev1.PodInitialized, initialized)
		setCondition(p, corev1.ContainersReady, ready)
		setCondition(p, corev1.PodReady, ready)
		_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return
		}
	}
}

func setCondition(p *corev1.Pod, t corev1.PodConditionType, ok bool) {
	status := corev1.ConditionFalse
	if ok {
		status = corev1.ConditionTrue
	}
	for i, c := range p.Status.Conditions {
		if c.Type == t {
			if c.Status != status {
				p.Status.Conditions[i].Status, p.Status.Conditions[i].LastTransitionTime = status, metav1.Now()
			}
			return
		}
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: status, LastTransitionTime: metav1.Now()})
}

func waiting(c corev1.Container, reason string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: c.Name, Image: c.Image, Started: ptrTo(false),
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}
}

func cloneStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	out := make([]corev1.ContainerStatus, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}

// exitCode is a process's exit status as a kubelet says it: 128 plus the
// signal for one killed by a signal (137 for SIGKILL).
func exitCode(ps *os.ProcessState) int32 {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int32(ws.Signal())
	}
	return int32(ps.ExitCode())
}

// lastBytes is at most n bytes of the end of the file at path, from
// offset from on: one run's last words.
func lastBytes(path string, from, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	end, err := f.Seek(0, 2)
	if err != nil {
		return ""
	}
	start := max(from, end-n)
	b := make([]byte, end-start)
	k, _ := f.ReadAt(b, start)
	return string(b[:k])
}

func ptrTo[T any](v T) *T { return &v }

package kubefleet_test

import (
	"context"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"

	"modelserve/catalog"
	"modelserve/internal/catalogtest"
	"modelserve/internal/fleet"
	"modelserve/internal/kubefleet"
	"modelserve/internal/kubetest"
	"modelserve/internal/operr"
	"modelserve/internal/testkit"
)

const ns = "modelserve"

// model is a catalog entry whose weights are on the mirror under mirrorDir.
func model(mirrorDir, name string, p catalog.Profile) catalog.Model {
	p.Engine = "llamacpp"
	if p.Name == "" {
		p.Name = "cpu"
	}
	p.Pool, p.Slots = 4096, 2
	return catalog.Model{
		Name: name, Source: filepath.Join(mirrorDir, name, "abc1234", "tiny-Q8_0.gguf"), Weights: []string{"tiny-Q8_0.gguf"},
		Profiles: []catalog.Profile{p}, Scaling: catalog.Scaling{Min: 1}, AddedAt: time.Now(),
		Origin: &catalog.Origin{Repo: "org/tiny", Revision: "abc1234", Files: []catalog.OriginFile{
			{Path: "tiny-Q8_0.gguf", Bytes: 3 << 30, SHA256: strings.Repeat("ab", 32)},
		}},
	}
}

// TestKubernetesFleet runs the fleet against a real control plane (kwok
// nodes), as modelserve's ServiceAccount bound by deploy/rbac.yaml and
// nothing more. The cases share the cluster, each with models of its own.
func TestKubernetesFleet(t *testing.T) {
	c := kubetest.Start(t)
	c.AddNode(t, kubetest.Node{Name: "cpu-1", CPU: 8, Memory: "32Gi"})
	c.AddNode(t, kubetest.Node{Name: "gpu-1", CPU: 16, Memory: "64Gi", GPUs: 1,
		Labels: map[string]string{"nvidia.com/gpu.product": "NVIDIA-L4"}})

	// As modelserve's ServiceAccount of deploy/rbac.yaml, and nothing more.
	client := c.Client(t, c.Account(t, "../../deploy/rbac.yaml"))
	c.Apply(t, "../../deploy/networkpolicy.yaml")
	mirrorDir := t.TempDir()
	cat := &catalogtest.Catalog{}
	f, _ := runFleet(t, client, cat, mirrorDir)
	admin := c.Admin

	t.Run("a served model is a Deployment running the engine's command line", func(t *testing.T) {
		m := model(mirrorDir, "tiny", catalog.Profile{RAMBytes: 2 << 30, CPUCores: 2})
		cat.Put(m)
		f.Poke()
		r := testkit.WaitForValue(t, time.Minute, "a ready replica of tiny", func() (fleet.Replica, bool) {
			rs := f.Serving("tiny")
			return first(rs), len(rs) == 1
		})
		if !strings.HasPrefix(r.Endpoint, "http://") || !strings.HasSuffix(r.Endpoint, ":8080") {
			t.Errorf("endpoint %q, want the pod's address on port 8080", r.Endpoint)
		}
		if f.EngineKey(r.ID) == "" {
			t.Errorf("no engine key for replica %s", r.ID)
		}
		deps, err := admin.AppsV1().Deployments(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=modelserve"})
		if err != nil || len(deps.Items) != 1 {
			t.Fatalf("deployments: %v, %d of them, want 1", err, len(deps.Items))
		}
		d := deps.Items[0]
		checkDeployment(t, d, f.EngineKey(r.ID))
		want := fleet.EngineArgs(m, m.Profiles[0], "/weights/tiny-Q8_0.gguf", "", 2)
		if got := d.Spec.Template.Spec.Containers[0].Args; !slices.Equal(got[:len(want)], want) ||
			strings.Join(got[len(want):], " ") != "--host 0.0.0.0 --port 8080" {
			t.Errorf("engine args %q, want the local fleet's %q then --host 0.0.0.0 --port 8080", got, want)
		}
		if _, err := admin.CoreV1().Services(ns).Get(context.Background(), d.Labels["modelserve.io/model"], metav1.GetOptions{}); err != nil {
			t.Errorf("no Service for tiny: %v", err)
		}
		h := health(f, "tiny")
		if h.Ready != 1 || h.Want != 1 || h.Parked || h.Unplaceable {
			t.Errorf("health %+v, want 1 of 1 ready", h)
		}
	})

	t.Run("a GPU profile is placed on a node with the card", func(t *testing.T) {
		cat.Put(model(mirrorDir, "vision", catalog.Profile{Name: "l4", GPUClass: "L4", GPUsPerNode: 1, CardBytes: 8 << 30, RAMBytes: 2 << 30}))
		f.Poke()
		r := testkit.WaitForValue(t, time.Minute, "a ready replica of vision", func() (fleet.Replica, bool) {
			rs := f.Serving("vision")
			return first(rs), len(rs) == 1
		})
		if r.Node != "gpu-1" {
			t.Errorf("vision runs on %s, want gpu-1 (the only node with an L4)", r.Node)
		}
		pool := testkit.WaitForValue(t, time.Minute, "the pool to count vision's card", func() ([]fleetNode, bool) {
			p := poolOf(f)
			return p, len(p) == 2 && p[1].gpus == 1 && p[1].freeCards == 0
		})
		if pool[0].name != "cpu-1" || pool[0].cores != 8 || pool[0].ramGB != 32 {
			t.Errorf("pool node %+v, want cpu-1 with 8 cores and 32 GB", pool[0])
		}
		// Free is allocatable less what every pod on the node requests
		// (the scheduler may have put tiny there too).
		pods, err := admin.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=gpu-1"})
		if err != nil {
			t.Fatal(err)
		}
		var requested int64
		for _, p := range pods.Items {
			requested += p.Spec.Containers[0].Resources.Requests.Memory().Value()
		}
		if want := 64 - float64(requested)/(1<<30); pool[1].class != "L4" || pool[1].freeRAMGB != want || requested < 2<<30 {
			t.Errorf("pool node %+v, want gpu-1's L4 and %.1f GB free after its pods' %d bytes", pool[1], want, requested)
		}
	})

	t.Run("a replica the scheduler finds no room for is placing in its words", func(t *testing.T) {
		// The fleet places by memory and cards; the scheduler counts CPU
		// requests too, and three replicas of 8 cores do not fit the
		// nodes' 24 beside tiny's 2: one waits for the scheduler, saying
		// why in the scheduler's words.
		wide := model(mirrorDir, "wide", catalog.Profile{RAMBytes: 1 << 30, CPUCores: 8})
		wide.Scaling.Min = 3
		cat.Put(wide)
		f.Poke()
		testkit.WaitForValue(t, time.Minute, "a replica of wide placing in the scheduler's words", func() ([]fleet.Replica, bool) {
			rs := replicasOf(f, "wide")
			return rs, slices.ContainsFunc(rs, func(r fleet.Replica) bool {
				return r.State == fleet.Starting && strings.Contains(r.Detail, "nodes are available") && strings.Contains(r.Detail, "Insufficient cpu")
			})
		})
		removeAndWait(t, f, cat, "wide")
	})

	t.Run("a model no node could ever host is unplaceable, and has no pod", func(t *testing.T) {
		cat.Put(model(mirrorDir, "big", catalog.Profile{Name: "l4x2", GPUClass: "L4", GPUsPerNode: 2, CardBytes: 8 << 30, RAMBytes: 3 << 30}))
		f.Poke()
		h := testkit.WaitForValue(t, time.Minute, "big to be unplaceable", func() (fleet.ModelHealth, bool) {
			h := health(f, "big")
			return h, h.Unplaceable
		})
		if !strings.Contains(h.Placement, "no node could ever host it") || !strings.Contains(h.Placement, "node gpu-1: needs 2 L4 cards") {
			t.Errorf("placement %q, want the fleet's sentence naming gpu-1's one L4 card", h.Placement)
		}
		if rs := replicasOf(f, "big"); len(rs) != 0 {
			t.Errorf("big, which no node could host, has replicas %+v", rs)
		}
	})

	t.Run("an engine failing to start three times parks its model with its words", func(t *testing.T) {
		cat.Put(model(mirrorDir, "broken", catalog.Profile{RAMBytes: 1 << 30, CPUCores: 1}))
		f.Poke()
		r := testkit.WaitForValue(t, time.Minute, "a ready replica of broken", func() (fleet.Replica, bool) {
			rs := f.Serving("broken")
			return first(rs), len(rs) == 1
		})
		crashLoop(t, admin, podOf(t, admin, r).Name, "llama_model_load: error loading model: tensor 'blk.0.attn_q.weight' has wrong shape")
		h := testkit.WaitForValue(t, time.Minute, "broken to be parked", func() (fleet.ModelHealth, bool) {
			h := health(f, "broken")
			return h, h.Parked
		})
		if !strings.Contains(h.Reason, "error loading model: tensor 'blk.0.attn_q.weight' has wrong shape") || !strings.Contains(h.Reason, "status 1") {
			t.Errorf("parked for %q, want the engine's exit status and its last words", h.Reason)
		}
		// Parked means scaled to nought.
		testkit.WaitForValue(t, time.Minute, "broken's Deployment at 0 replicas", func() (int32, bool) {
			n := *deploymentOf(t, admin, "broken").Spec.Replicas
			return n, n == 0
		})

		// The operator fixed the cause: unparked, it runs again, and the
		// pod that failed before is not held against it. Unparked at once,
		// before the ReplicaSet has deleted that pod: scaled back up, it
		// would keep it, failing as before.
		if err := f.Unpark(context.Background(), "tiny"); kindOf(err) != operr.Conflict {
			t.Errorf("unparking a model that is not parked: %v, want a conflict", err)
		}
		if err := f.Unpark(context.Background(), "nothing"); kindOf(err) != operr.NotFound {
			t.Errorf("unparking a model the fleet does not have: %v, want not found", err)
		}
		if err := f.Unpark(context.Background(), "broken"); err != nil {
			t.Fatalf("Unpark: %v", err)
		}
		again := testkit.WaitForValue(t, time.Minute, "a new ready replica of broken", func() (fleet.Replica, bool) {
			rs := f.Serving("broken")
			return first(rs), len(rs) == 1 && rs[0].ID != r.ID
		})
		if h := health(f, "broken"); h.Parked {
			t.Errorf("broken is parked again after its unpark, with %s ready: %q", again.ID, h.Reason)
		}
		owner, err := admin.CoreV1().ConfigMaps(ns).Get(context.Background(), deploymentOf(t, admin, "broken").Labels["modelserve.io/model"], metav1.GetOptions{})
		if err != nil || owner.Annotations["modelserve.io/parked-reason"] != "" {
			t.Errorf("the park is still kept on broken's owner (%v): %q", err, owner.Annotations["modelserve.io/parked-reason"])
		}
	})

	t.Run("stopping a replica deletes its pod and its Deployment starts another", func(t *testing.T) {
		before := first(f.Serving("tiny"))
		// Whoever keeps connections to its engine (the gateway) is told,
		// to close them: llama-server waits for them as it stops.
		var toldMu sync.Mutex
		told := map[string]bool{}
		f.OnStopping(func(endpoint string) {
			toldMu.Lock()
			defer toldMu.Unlock()
			told[endpoint] = true
		})
		if err := f.Stop(before.ID); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		testkit.WaitForValue(t, time.Minute, "a new ready replica of tiny", func() (fleet.Replica, bool) {
			rs := f.Serving("tiny")
			return first(rs), len(rs) == 1 && rs[0].ID != before.ID
		})
		testkit.WaitForValue(t, time.Minute, "the pod's deletion told to OnStopping", func() (map[string]bool, bool) {
			toldMu.Lock()
			defer toldMu.Unlock()
			return maps.Clone(told), told[before.Endpoint]
		})
		if err := f.Stop(before.ID); kindOf(err) != operr.NotFound && kindOf(err) != operr.Conflict {
			t.Errorf("stopping a replica that has gone: %v, want not found (or stopping already)", err)
		}
		if err := f.Restart("tiny-nothing"); kindOf(err) != operr.NotFound {
			t.Errorf("restarting a replica the fleet does not have: %v, want not found", err)
		}
	})

	t.Run("a replica stopped with a request in flight drains before its pod is deleted", func(t *testing.T) {
		cat.Put(model(mirrorDir, "steady", catalog.Profile{RAMBytes: 1 << 30, CPUCores: 1}))
		f.Poke()
		r := testkit.WaitForValue(t, time.Minute, "a ready replica of steady", func() (fleet.Replica, bool) {
			rs := f.Serving("steady")
			return first(rs), len(rs) == 1
		})
		pod := podOf(t, admin, r).Name
		release, ok := f.Hold(r.ID, time.Now())
		if !ok {
			t.Fatalf("a ready replica refused a request")
		}
		if err := f.Stop(r.ID); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if len(f.Serving("steady")) != 0 {
			t.Errorf("a draining replica is still served: %+v", f.Serving("steady"))
		}
		if _, ok := f.Hold(r.ID, time.Now()); ok {
			t.Errorf("a draining replica took a new request")
		}
		// A pass or two in which the pod must stay, and time for the
		// ReplicaSet controller, on Kubernetes' clock, to delete it were
		// its Deployment lowered under it.
		time.Sleep(2 * time.Second)
		if p, err := admin.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
			t.Fatalf("the pod was deleted with its request in flight: %v", err)
		}
		got := replicasOf(f, "steady")
		if i := slices.IndexFunc(got, func(g fleet.Replica) bool { return g.ID == r.ID }); i < 0 || got[i].State != fleet.Draining ||
			!strings.Contains(got[i].Detail, "stopped by an operator") {
			t.Errorf("replicas while draining: %+v, want %s draining, stopped by an operator", got, r.ID)
		}
		release()
		testkit.WaitForValue(t, time.Minute, "a new ready replica of steady", func() (fleet.Replica, bool) {
			rs := f.Serving("steady")
			return first(rs), len(rs) == 1 && rs[0].ID != r.ID
		})
		cat.Remove("steady")
		f.Poke()
	})

	t.Run("removing a model removes its objects", func(t *testing.T) {
		sel := "modelserve.io/model=" + deploymentOf(t, admin, "tiny").Labels["modelserve.io/model"]
		cat.Remove("tiny")
		f.Poke()
		testkit.WaitForValue(t, time.Minute, "tiny's objects to be gone", func() (string, bool) {
			bg := context.Background()
			cms, _ := admin.CoreV1().ConfigMaps(ns).List(bg, metav1.ListOptions{LabelSelector: sel})
			deps, _ := admin.AppsV1().Deployments(ns).List(bg, metav1.ListOptions{LabelSelector: sel})
			svcs, _ := admin.CoreV1().Services(ns).List(bg, metav1.ListOptions{LabelSelector: sel})
			secs, _ := admin.CoreV1().Secrets(ns).List(bg, metav1.ListOptions{LabelSelector: sel})
			pods, _ := admin.CoreV1().Pods(ns).List(bg, metav1.ListOptions{LabelSelector: sel})
			left := len(cms.Items) + len(deps.Items) + len(svcs.Items) + len(secs.Items) + len(pods.Items)
			return strings.Repeat("x", left), left == 0
		})
		if h := health(f, "tiny"); h.Model != "" {
			t.Errorf("tiny still has health %+v", h)
		}
	})

	t.Run("the service account may do no more than its namespace and reading nodes", func(t *testing.T) {
		_, err := client.CoreV1().Secrets("kube-system").List(context.Background(), metav1.ListOptions{})
		if err == nil {
			t.Error("modelserve's account can read kube-system's Secrets: deploy/rbac.yaml grants more than the fleet needs")
		}
	})
}

// checkDeployment checks what a replica's pod is made of.
func checkDeployment(t *testing.T, d appsv1.Deployment, key string) {
	t.Helper()
	spec := d.Spec.Template.Spec
	if len(d.OwnerReferences) != 1 || d.OwnerReferences[0].Kind != "ConfigMap" {
		t.Errorf("owners %+v, want the model's ConfigMap", d.OwnerReferences)
	}
	e := spec.Containers[0]
	for _, a := range e.Args {
		if a == "--api-key" || a == key {
			t.Errorf("the replica key is in the engine's args in clear: %q", e.Args)
		}
	}
	for _, v := range append(slices.Clone(e.Env), spec.InitContainers[0].Env...) {
		if v.Value == key {
			t.Errorf("the replica key is in env %s in clear", v.Name)
		}
	}
	if k := envRef(e.Env, "LLAMA_API_KEY"); k == nil || !strings.HasSuffix(k.Name, "-key") {
		t.Errorf("LLAMA_API_KEY is not from the model's Secret: %+v", e.Env)
	}
	if got := e.Resources.Requests.Memory().Value(); got != 2<<30 || e.Resources.Limits.Memory().Value() != 2<<30 {
		t.Errorf("memory request %d, limit %v, want both 2 GiB", got, e.Resources.Limits.Memory())
	}
	if got := e.Resources.Requests.Cpu().Value(); got != 2 {
		t.Errorf("cpu request %d, want the profile's 2 cores", got)
	}
	if e.ReadinessProbe == nil || e.ReadinessProbe.HTTPGet == nil || e.ReadinessProbe.HTTPGet.Path != "/health" {
		t.Errorf("readiness probe %+v, want GET /health", e.ReadinessProbe)
	}
	// 3 GB of weights: the local deadline is 5 min + 3×20 s = 6 min.
	if sp := e.StartupProbe; sp == nil || sp.PeriodSeconds*sp.FailureThreshold < 360 {
		t.Errorf("startup probe %+v, want at least the local fleet's 6 minutes for 3 GB", sp)
	}
	if e.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
		t.Errorf("termination message policy %q, want FallbackToLogsOnError", e.TerminationMessagePolicy)
	}
	ic := spec.InitContainers[0]
	if got := envValue(ic.Env, "MODELSERVE_MIRROR"); got != "http://modelserve.modelserve.svc:8080/mirror/tiny/abc1234" {
		t.Errorf("init container fetches from %q", got)
	}
	if got := envValue(ic.Env, "MODELSERVE_FILES"); got != strings.Repeat("ab", 32)+" 3221225472 tiny-Q8_0.gguf" {
		t.Errorf("init container fetches %q, want the file with its sha256 and size", got)
	}
	if k := envRef(ic.Env, "MODELSERVE_MIRROR_TOKEN"); k == nil || k.Name != kubefleet.MirrorSecret {
		t.Errorf("the mirror token is not from the Secret %s: %+v", kubefleet.MirrorSecret, ic.Env)
	}
	if spec.Volumes[0].EmptyDir == nil {
		t.Errorf("weights volume %+v, want an emptyDir by default", spec.Volumes[0])
	}
}

// crashLoop makes pod's engine look as a kubelet shows one that keeps
// failing. kwok's fast stages act only on pending pods (and deleted ones),
// so a running pod keeps the status written here.
func crashLoop(t *testing.T, admin kubernetes.Interface, pod, message string) {
	t.Helper()
	bg := context.Background()
	p, err := admin.CoreV1().Pods(ns).Get(bg, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			p.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "engine", Image: p.Spec.Containers[0].Image, RestartCount: 3, Ready: false,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 40s restarting failed container"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 1, Reason: "Error", Message: "llama_model_loader: loaded meta data\n" + message + "\nmain: exiting due to model loading error\n"}},
	}}
	if _, err := admin.CoreV1().Pods(ns).UpdateStatus(bg, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// twoPasses has the fleet pass over every model twice (Sync): what it was
// to decide by now it has decided, and written to its objects, and the
// pass after has not undone it. What Kubernetes' own controllers then do
// of those objects (a ReplicaSet deleting a pod) is theirs, in their time.
func twoPasses(t *testing.T, f *kubeFleet) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 2 {
		if err := f.Sync(ctx); err != nil {
			t.Fatalf("the fleet did not pass over its models within a minute: %v", err)
		}
	}
}

func first(rs []fleet.Replica) fleet.Replica {
	if len(rs) == 0 {
		return fleet.Replica{}
	}
	return rs[0]
}

func health(f *kubeFleet, name string) fleet.ModelHealth {
	for _, h := range f.ModelHealth() {
		if h.Model == name {
			return h
		}
	}
	return fleet.ModelHealth{}
}

func replicasOf(f *kubeFleet, name string) []fleet.Replica {
	var out []fleet.Replica
	for _, r := range f.Replicas() {
		if r.Model == name {
			out = append(out, r)
		}
	}
	return out
}

func deploymentOf(t *testing.T, admin kubernetes.Interface, model string) appsv1.Deployment {
	t.Helper()
	deps, err := admin.AppsV1().Deployments(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		if d.Annotations["modelserve.io/model"] == model {
			return d
		}
	}
	t.Fatalf("no Deployment of %s", model)
	return appsv1.Deployment{}
}

// fleetNode is a pool node, in the figures a test compares.
type fleetNode struct {
	name             string
	cores            int
	ramGB, freeRAMGB float64
	class            string
	gpus, freeCards  int
}

func poolOf(f *kubeFleet) []fleetNode {
	var out []fleetNode
	for _, n := range f.Pool() {
		fn := fleetNode{name: n.Name, cores: n.CPUCores, ramGB: float64(n.RAMBytes) / (1 << 30), freeRAMGB: float64(n.FreeRAMBytes) / (1 << 30)}
		for _, g := range n.GPUs {
			fn.class, fn.gpus = g.Class, g.Count
			for _, free := range g.FreeBytes {
				if free > 0 {
					fn.freeCards++
				}
			}
		}
		out = append(out, fn)
	}
	return out
}

func envValue(env []corev1.EnvVar, name string) string {
	for _, v := range env {
		if v.Name == name {
			return v.Value
		}
	}
	return ""
}

func envRef(env []corev1.EnvVar, name string) *corev1.SecretKeySelector {
	for _, v := range env {
		if v.Name == name && v.ValueFrom != nil {
			return v.ValueFrom.SecretKeyRef
		}
	}
	return nil
}

// kindOf is the kind of the operator's error err is, "" for none.
func kindOf(err error) operr.Kind {
	if e, ok := operr.As(err); ok {
		return e.Kind
	}
	return ""
}

// TestKubeletRestartsAreFailuresForgivenOnceStable: each restart of a
// pod's engine by its kubelet is a failure of its model's, as an engine's
// exit is locally, counted once; and a pod ready for a minute since has
// them forgiven, as a local engine serving a minute has: counted for
// ever, a few restarts over a pod's life would park a model that serves.
func TestKubeletRestartsAreFailuresForgivenOnceStable(t *testing.T) {
	c := kubetest.Start(t)
	c.AddNode(t, kubetest.Node{Name: "cpu-1", CPU: 8, Memory: "32Gi"})
	client := c.Client(t, c.Account(t, "../../deploy/rbac.yaml"))
	clk := clocktesting.NewFakeClock(time.Now())
	cat := &catalogtest.Catalog{}
	mirrorDir := t.TempDir()
	f := newKubeFleet(t, kubefleet.Options{
		Client: client, Catalog: cat, Namespace: ns, EngineImage: "ghcr.io/ggml-org/llama.cpp:server",
		MirrorURL: "http://modelserve.modelserve.svc:8080/", MirrorDir: mirrorDir, MirrorToken: "ms_nodes",
		Resync: 5 * time.Second, Clock: clk,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	<-f.Synced()
	cat.Put(model(mirrorDir, "flaky", catalog.Profile{RAMBytes: 1 << 30, CPUCores: 1}))
	f.Poke()
	r := testkit.WaitForValue(t, time.Minute, "a ready replica of flaky", func() (fleet.Replica, bool) {
		rs := f.Serving("flaky")
		return first(rs), len(rs) == 1
	})

	// Its kubelet restarted its engine twice, and it is ready again.
	bg := context.Background()
	p := podOf(t, c.Admin, r)
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "engine", Image: p.Spec.Containers[0].Image, RestartCount: 2, Ready: true,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 139, Reason: "Error", Message: "ggml_abort: out of memory\n"}},
	}}
	if _, err := c.Admin.CoreV1().Pods(ns).UpdateStatus(bg, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h := testkit.WaitForValue(t, time.Minute, "flaky's two failures counted", func() (fleet.ModelHealth, bool) {
		h := health(f, "flaky")
		return h, h.Failures == 2
	})
	if h.Parked {
		t.Errorf("flaky is parked after 2 failures of 3: %+v", h)
	}
	// Counted once: the pod's status read again counts nothing more.
	for range 3 {
		if err := f.Sync(bg); err != nil {
			t.Fatal(err)
		}
	}
	if h := health(f, "flaky"); h.Failures != 2 {
		t.Errorf("flaky's failures %d after its pod was read again, want the 2 restarts counted once", h.Failures)
	}

	clk.Step(61 * time.Second)
	testkit.WaitForValue(t, time.Minute, "flaky's failures forgiven after a minute ready", func() (fleet.ModelHealth, bool) {
		h := health(f, "flaky")
		return h, h.Failures == 0 && !h.Parked
	})
}

package kubefleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"modelserve/catalog"
	"modelserve/internal/catalogtest"
	"modelserve/internal/fleet"
	"modelserve/internal/gguf"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hf"
	"modelserve/internal/kubefleet"
	"modelserve/internal/kubetest"
	"modelserve/internal/plan"
	"modelserve/internal/testkit"
)

// runFleet runs a fleet over cat as deploy/rbac.yaml's account until the
// returned stop is called (or t ends).
func runFleet(t *testing.T, client kubernetes.Interface, cat *catalogtest.Catalog, mirrorDir string) (*kubeFleet, func()) {
	t.Helper()
	f := newKubeFleet(t, kubefleet.Options{
		Client: client, Catalog: cat, Namespace: ns, EngineImage: "ghcr.io/ggml-org/llama.cpp:server",
		MirrorURL: "http://modelserve.modelserve.svc:8080/", MirrorDir: mirrorDir, MirrorToken: "ms_nodes",
		Resync: 5 * time.Second,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	<-f.Synced()
	return f, stop
}

// TestKubernetesParity: each Deployment (a model's profile) has
// a key of its own, in a Secret it owns, and the key the fleet gives for
// a pod is the one its engine reads; a cluster whose pods read the one key
// a model had before keeps them, answering to it, until they start afresh
// with their Deployment's key, and the old key goes once no pod reads it. A
// replica on cards asks for the memory it holds in RAM. deploy/'s
// NetworkPolicy selects the engine pods the fleet writes and lets in only
// modelserve's pod as deploy/modelserve.yaml labels it.
func TestKubernetesParity(t *testing.T) {
	c := kubetest.Start(t)
	c.AddNode(t, kubetest.Node{Name: "cpu-1", CPU: 8, Memory: "32Gi"})
	c.AddNode(t, kubetest.Node{Name: "gpu-1", CPU: 16, Memory: "64Gi", GPUs: 2,
		Labels: map[string]string{"nvidia.com/gpu.product": "NVIDIA-L4"}})
	client := c.Client(t, c.Account(t, "../../deploy/rbac.yaml"))
	c.Apply(t, "../../deploy/networkpolicy.yaml")
	admin := c.Admin
	bg := context.Background()
	mirrorDir := t.TempDir()
	cat := &catalogtest.Catalog{}

	t.Run("a key per Deployment, owned by it, is the one its pods read", func(t *testing.T) {
		f, stop := runFleet(t, client, cat, mirrorDir)
		defer stop()
		// Two cards for three replicas: two on its preferred profile's
		// cards, the third on its second profile, in RAM.
		m := model(mirrorDir, "twoprof", catalog.Profile{Name: "l4", GPUClass: "L4", GPUsPerNode: 1, CardBytes: 8 << 30,
			RAMBytes: 1 << 30, CPUCores: 1, Priority: 100})
		second := m.Profiles[0]
		second.Name, second.Priority, second.GPUClass, second.GPUsPerNode, second.CardBytes = "cpu-small", 50, "", 0, 0
		m.Profiles = append(m.Profiles, second)
		m.Scaling.Min = 3
		cat.Put(m)
		f.Poke()
		rs := testkit.WaitForValue(t, time.Minute, "three ready replicas of twoprof", func() ([]fleet.Replica, bool) {
			rs := f.Serving("twoprof")
			return rs, len(rs) == 3
		})
		deps := deploymentsOf(t, admin, "twoprof")
		if len(deps) != 2 {
			t.Fatalf("%d Deployments of twoprof, want one per profile", len(deps))
		}
		keys := map[string]string{}
		for _, d := range deps {
			s := testkit.WaitForValue(t, time.Minute, "the key of "+d.Name, func() (*corev1.Secret, bool) {
				s, err := admin.CoreV1().Secrets(ns).Get(bg, envRef(d.Spec.Template.Spec.Containers[0].Env, "LLAMA_API_KEY").Name, metav1.GetOptions{})
				return s, err == nil
			})
			if o := s.OwnerReferences; len(o) != 1 || o[0].Kind != "Deployment" || o[0].UID != d.UID {
				t.Errorf("Secret %s is owned by %+v, want Deployment %s alone", s.Name, o, d.Name)
			}
			keys[d.Name] = string(s.Data["api-key"])
		}
		if len(keys) != 2 || keys[deps[0].Name] == keys[deps[1].Name] || keys[deps[0].Name] == "" {
			t.Errorf("the two profiles' keys %v, want two different keys", keys)
		}
		for _, r := range rs {
			pod := podOf(t, admin, r)
			if got, want := f.EngineKey(r.ID), keys[pod.Labels["modelserve.io/deployment"]]; got != want {
				t.Errorf("EngineKey(%s) = %q, want its Deployment's key %q", r.ID, got, want)
			}
		}
		cat.Remove("twoprof")
		f.Poke()
		testkit.WaitForValue(t, time.Minute, "twoprof's keys to go with it", func() (int, bool) {
			secs, _ := admin.CoreV1().Secrets(ns).List(bg, metav1.ListOptions{LabelSelector: "modelserve.io/model=" + deps[0].Labels["modelserve.io/model"]})
			return len(secs.Items), len(secs.Items) == 0
		})
	})

	t.Run("pods reading their model's one key keep it until they start afresh", func(t *testing.T) {
		m := model(mirrorDir, "legacy", catalog.Profile{RAMBytes: 1 << 30, CPUCores: 1})
		cat.Put(m)
		f, stop := runFleet(t, client, cat, mirrorDir)
		testkit.WaitForValue(t, time.Minute, "a ready replica of legacy", func() (int, bool) { n := len(f.Serving("legacy")); return n, n == 1 })
		stop()
		// As the release before wrote it: one key for the model, owned by
		// its ConfigMap, which the Deployment's pods read; none per
		// Deployment.
		d := deploymentOf(t, admin, "legacy")
		owner, err := admin.CoreV1().ConfigMaps(ns).Get(bg, d.Labels["modelserve.io/model"], metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		oldName := d.Labels["modelserve.io/model"] + "-key"
		if _, err := admin.CoreV1().Secrets(ns).Create(bg, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: oldName, Namespace: ns, Labels: map[string]string{
				"app.kubernetes.io/managed-by": "modelserve", "modelserve.io/model": d.Labels["modelserve.io/model"]},
				Annotations:     map[string]string{"modelserve.io/model": "legacy"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}},
			StringData: map[string]string{"api-key": "the-model-key-of-before"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		newName := envRef(d.Spec.Template.Spec.Containers[0].Env, "LLAMA_API_KEY").Name
		// Nor did it keep the hash of the template on the Deployment.
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{"modelserve.io/template": nil}},
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
				"containers": []map[string]any{{"name": "engine", "env": []map[string]any{{"name": "LLAMA_API_KEY",
					"valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": oldName, "key": "api-key"}}}}}}}}}})
		if _, err := admin.AppsV1().Deployments(ns).Patch(bg, d.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := admin.CoreV1().Secrets(ns).Delete(bg, newName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testkit.WaitForValue(t, time.Minute, "legacy's pods to read the model's key", func() (int, bool) {
			pods := podsOf(t, admin, d.Name)
			return len(pods), len(pods) == 1 && keyNameOf(pods[0]) == oldName && ready(pods[0])
		})

		oldPod := podsOf(t, admin, d.Name)[0].Name
		before := deploymentOf(t, admin, "legacy")
		if before.Annotations["modelserve.io/template"] != "" {
			t.Fatal("the Deployment as the release before wrote it keeps a template hash")
		}

		// The upgrade: its pod goes on answering to the key it has, and
		// is not restarted for a key alone.
		f, stop = runFleet(t, client, cat, mirrorDir)
		defer stop()
		for range 3 {
			if err := f.Sync(bg); err != nil {
				t.Fatal(err)
			}
		}
		served := f.Serving("legacy")
		if len(served) != 1 || served[0].ID != oldPod {
			t.Fatalf("after the upgrade legacy is served by %+v, want its pod %s as it was", served, oldPod)
		}
		if got := f.EngineKey(oldPod); got != "the-model-key-of-before" {
			t.Errorf("EngineKey(%s) = %q after the upgrade, want the model's key its engine reads", oldPod, got)
		}
		if _, err := admin.CoreV1().Secrets(ns).Get(bg, oldName, metav1.GetOptions{}); err != nil {
			t.Errorf("the model's key, which its pod reads, is gone: %v", err)
		}
		// Its template, as it was, takes its hash in place: nothing rolls.
		after := deploymentOf(t, admin, "legacy")
		if after.Annotations["modelserve.io/template"] == "" {
			t.Errorf("after the upgrade legacy's Deployment keeps no hash of its template: the next change of it would roll its pods undrained")
		}
		if !apiequality.Semantic.DeepEqual(after.Spec.Template, before.Spec.Template) {
			t.Errorf("the upgrade rewrote legacy's pod template (its pods roll for it):\nbefore %+v\nafter  %+v", before.Spec.Template, after.Spec.Template)
		}
		if pods := podsOf(t, admin, d.Name); len(pods) != 1 || pods[0].Name != oldPod {
			t.Errorf("after the upgrade legacy's pods are %v, want %s as it was", keyNames(pods), oldPod)
		}

		// Served afresh, its pods read their Deployment's key, and the
		// model's goes.
		m.Profiles[0].Slots = 1
		cat.Put(m)
		f.Poke()
		testkit.WaitForValue(t, time.Minute, "legacy's pods to read their Deployment's key and the model's to be gone", func() (string, bool) {
			pods := podsOf(t, admin, d.Name)
			_, err := admin.CoreV1().Secrets(ns).Get(bg, oldName, metav1.GetOptions{})
			if len(pods) != 1 || keyNameOf(pods[0]) != newName || !ready(pods[0]) || !apierrors.IsNotFound(err) {
				return fmt.Sprintf("pods %v, the model's key: %v", keyNames(pods), err), false
			}
			r := f.Serving("legacy")
			return "", len(r) == 1 && f.EngineKey(r[0].ID) == secretValue(t, admin, newName) && f.EngineKey(r[0].ID) != ""
		})
	})

	t.Run("a replica on cards asks for its host memory and its prompt cache", func(t *testing.T) {
		f, stop := runFleet(t, client, cat, mirrorDir)
		defer stop()
		// As the plan writes a profile on cards: what each card holds, and
		// what it holds of the node's RAM beside them, its prompt cache in it.
		p := plannedCardProfile(t)
		cat.Put(model(mirrorDir, "carded", p))
		f.Poke()
		r := testkit.WaitForValue(t, time.Minute, "a ready replica of carded", func() (fleet.Replica, bool) {
			rs := f.Serving("carded")
			return first(rs), len(rs) == 1
		})
		res := deploymentOf(t, admin, "carded").Spec.Template.Spec.Containers[0].Resources
		want := p.RAMBytes
		if want <= p.PromptCacheBytes || res.Requests.Memory().Value() != want || res.Limits.Memory().Value() != want {
			t.Errorf("carded's engine asks for %v of memory (limit %v), want the plan's %d: the engine's host share and its %d prompt cache",
				res.Requests.Memory(), res.Limits.Memory(), want, p.PromptCacheBytes)
		}
		pod := podOf(t, admin, r)
		if pod.Status.QOSClass == corev1.PodQOSBestEffort {
			t.Errorf("carded's pod is %s: the first evicted when its node runs short of memory", pod.Status.QOSClass)
		}
		if rs := replicasOf(f, "carded"); len(rs) != 1 || rs[0].EstimateBytes != want {
			t.Errorf("the replica says it holds %+v, want its pod's %d bytes", rs, want)
		}
	})

	t.Run("deploy's NetworkPolicy lets only modelserve reach the engine pods", func(t *testing.T) {
		pols, err := admin.NetworkingV1().NetworkPolicies(ns).List(bg, metav1.ListOptions{})
		if err != nil || len(pols.Items) != 1 {
			t.Fatalf("NetworkPolicies in %s: %v, %d of them, want deploy/networkpolicy.yaml's", ns, err, len(pols.Items))
		}
		pol := pols.Items[0]
		engines, err := metav1.LabelSelectorAsSelector(&pol.Spec.PodSelector)
		if err != nil {
			t.Fatal(err)
		}
		pods, err := admin.CoreV1().Pods(ns).List(bg, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=modelserve"})
		if err != nil || len(pods.Items) == 0 {
			t.Fatalf("the fleet's pods: %v, %d of them", err, len(pods.Items))
		}
		for _, p := range pods.Items {
			if !engines.Matches(labels.Set(p.Labels)) {
				t.Errorf("the policy does not select engine pod %s (labels %v): anything in the cluster reaches it", p.Name, p.Labels)
			}
			if port := p.Spec.Containers[0].Ports[0].ContainerPort; len(pol.Spec.Ingress) != 1 || len(pol.Spec.Ingress[0].Ports) != 1 ||
				pol.Spec.Ingress[0].Ports[0].Port.IntValue() != int(port) {
				t.Errorf("the policy lets in %+v, want the engine port %d alone", pol.Spec.Ingress, port)
			}
		}
		// modelserve's own pod, as deploy/modelserve.yaml labels it.
		var self map[string]string
		for _, obj := range kubetest.Objects(t, "../../deploy/modelserve.yaml") {
			if d, ok := obj.(*appsv1.Deployment); ok && d.Name == "modelserve" {
				self = d.Spec.Template.Labels
				if d.Namespace != pol.Namespace {
					t.Errorf("modelserve runs in %s and the policy is in %s", d.Namespace, pol.Namespace)
				}
			}
		}
		if self == nil {
			t.Fatal("deploy/modelserve.yaml has no Deployment modelserve")
		}
		if engines.Matches(labels.Set(self)) {
			t.Errorf("the policy takes modelserve's own pod (labels %v) for an engine", self)
		}
		if len(pol.Spec.Ingress) != 1 || len(pol.Spec.Ingress[0].From) != 1 || pol.Spec.Ingress[0].From[0].NamespaceSelector != nil {
			t.Fatalf("the policy lets in %+v, want modelserve's pods of its own namespace alone", pol.Spec.Ingress)
		}
		from, err := metav1.LabelSelectorAsSelector(pol.Spec.Ingress[0].From[0].PodSelector)
		if err != nil {
			t.Fatal(err)
		}
		if from.Empty() || !from.Matches(labels.Set(self)) {
			t.Errorf("the policy lets in pods %q, which modelserve's pod (labels %v) is not among: it could not reach its engines", from, self)
		}
		for _, p := range pods.Items {
			if from.Matches(labels.Set(p.Labels)) {
				t.Errorf("the policy lets engine pod %s in as if it were modelserve", p.Name)
			}
		}
	})
}

func deploymentsOf(t *testing.T, admin kubernetes.Interface, model string) []appsv1.Deployment {
	t.Helper()
	deps, err := admin.AppsV1().Deployments(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []appsv1.Deployment
	for _, d := range deps.Items {
		if d.Annotations["modelserve.io/model"] == model {
			out = append(out, d)
		}
	}
	return out
}

// podsOf are Deployment name's pods not being deleted.
func podsOf(t *testing.T, admin kubernetes.Interface, name string) []corev1.Pod {
	t.Helper()
	pods, err := admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "modelserve.io/deployment=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

func keyNameOf(p corev1.Pod) string {
	if r := envRef(p.Spec.Containers[0].Env, "LLAMA_API_KEY"); r != nil {
		return r.Name
	}
	return ""
}

func keyNames(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name+":"+keyNameOf(p))
	}
	return out
}

func byName(pods []corev1.Pod, name string) *corev1.Pod {
	for i := range pods {
		if pods[i].Name == name {
			return &pods[i]
		}
	}
	return nil
}

func ready(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func secretValue(t *testing.T, admin kubernetes.Interface, name string) string {
	t.Helper()
	s, err := admin.CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return string(s.Data["api-key"])
}

// plannedCardProfile is the profile the plan writes for the tests' tiny
// model on one L4, at the pool model gives every profile.
func plannedCardProfile(t *testing.T) catalog.Profile {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tiny-Q8_0.gguf")
	if err := ggufgen.WriteFile(path, ggufgen.Spec{}); err != nil {
		t.Fatal(err)
	}
	h, err := gguf.Read(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	c := plan.Choice{Set: hf.FileSet{Name: "tiny-Q8_0"}, Layouts: []plan.Option{{Class: "L4", GPUsPerNode: 1, Nodes: 1}}}
	_, profiles, err := c.Serve(plan.Model{Header: h, WeightsBytes: int64(len(ggufgen.Bytes(ggufgen.Spec{})))},
		plan.Ask{CtxPool: 4096, ContextLength: 2048}, nil, plan.Extra{})
	if err != nil {
		t.Fatal(err)
	}
	p := profiles[0]
	p.Name = "l4"
	return p
}

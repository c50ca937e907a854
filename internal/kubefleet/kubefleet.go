// Package kubefleet is the fleet's backend on a Kubernetes cluster
// (fleet.Backend): each model's replicas are the pods of a Deployment per
// profile, placed by the cluster's scheduler on its nodes, with the
// weights fetched from modelserve's mirror by an init container.
//
// The controller in internal/fleet decides everything the local fleet
// decides (demand, swapping, draining, parks, classes, the headroom and
// every sentence said of them); this package only writes what it decides
// as objects (server-side apply, field manager "modelserve") and reads
// back what the cluster made of them through shared informers: the
// scheduler's own words when a pod has nowhere to go, the container's
// termination message when the engine keeps failing, the nodes'
// allocatable room.
package kubefleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"modelserve/internal/fleet"
	"modelserve/internal/operr"
)

// Options configure the backend (NewBackend). Client, Catalog, Namespace, EngineImage,
// MirrorURL and MirrorDir are required.
type Options struct {
	Client  kubernetes.Interface
	Catalog fleet.Catalog
	// Namespace holds every object of the fleet.
	Namespace string
	// EngineImage is the llama.cpp server image; its entrypoint must be
	// llama-server (as the official server image's is).
	EngineImage string
	// VLLMImage is vLLM's OpenAI server image (vllm/vllm-openai:v0.11.0),
	// whose entrypoint is that server, for models of original weights;
	// without it they are parked, saying so.
	VLLMImage string
	// FetchImage runs the init container that fetches the weights: any
	// image with busybox's sh, wget and sha256sum. "busybox:1.37" unless
	// set.
	FetchImage string
	// MirrorURL is modelserve's address as the nodes reach it; the
	// weights are fetched from MirrorURL/mirror/<model>/<revision>/<file>.
	MirrorURL string
	// MirrorDir is the mirror's folder here, which the catalog's sources
	// are under.
	MirrorDir string
	// MirrorToken, when set, is written to the MirrorSecret Secret the
	// init containers read; empty leaves that Secret to the operator.
	MirrorToken string
	// WeightsVolume is where pods keep the weights: "" (an emptyDir),
	// "pvc:<claim>" or "hostPath:<folder>".
	WeightsVolume string
	// GPUProductLabel is the node label naming the card
	// ("nvidia.com/gpu.product" unless set), GPUResource the extended
	// resource counting the cards ("nvidia.com/gpu" unless set).
	GPUProductLabel string
	GPUResource     corev1.ResourceName
	// Clock times how long a pod has been ready, after which its model's
	// failed starts are forgiven: the real clock unless set.
	Clock clock.PassiveClock
	// Resync is how often the informers replay every object, and the
	// objects of models gone from the catalog are looked for: 30 s unless
	// set.
	Resync time.Duration
	Log    *slog.Logger
}

// withDefaults is opts with its defaults, or the first missing option,
// named.
func withDefaults(opts Options) (Options, error) {
	switch {
	case opts.Client == nil:
		return opts, errors.New("the kubernetes fleet needs a client: set Options.Client")
	case opts.Catalog == nil:
		return opts, errors.New("the kubernetes fleet needs a catalog: set Options.Catalog")
	case opts.Namespace == "":
		return opts, errors.New("the kubernetes fleet needs a namespace: set Options.Namespace")
	case opts.EngineImage == "":
		return opts, operr.New(operr.Invalid, "the kubernetes fleet needs the llama.cpp server image its pods run: pass --engine-image (for example ghcr.io/ggml-org/llama.cpp:server)")
	case opts.MirrorURL == "":
		return opts, operr.New(operr.Invalid, "the kubernetes fleet needs modelserve's address as the nodes reach it, to fetch weights from its mirror: pass --mirror-url (or --public-url)")
	case opts.MirrorDir == "":
		return opts, errors.New("the kubernetes fleet needs the mirror's folder: set Options.MirrorDir")
	}
	if opts.FetchImage == "" {
		opts.FetchImage = "busybox:1.37"
	}
	if opts.GPUProductLabel == "" {
		opts.GPUProductLabel = "nvidia.com/gpu.product"
	}
	if opts.GPUResource == "" {
		opts.GPUResource = "nvidia.com/gpu"
	}
	if opts.Resync <= 0 {
		opts.Resync = 30 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return opts, nil
}

func (f *cluster) unreachable(ctx context.Context) error {
	if ctx.Err() != nil {
		return nil
	}
	return operr.New(operr.Unavailable, "the cluster's API did not list the fleet's objects within a minute: check --kubeconfig and that modelserve's account may read namespace %s and the nodes (deploy/rbac.yaml)", f.opts.Namespace)
}

// apply writes obj by server-side apply as the field manager "modelserve":
// the fields it sets are its own, and a field it stops setting goes.
func (f *cluster) apply(ctx context.Context, obj metav1.Object) (metav1.Object, error) {
	body, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	opts := metav1.PatchOptions{FieldManager: fieldManager, Force: ptr(true)}
	ns, name := f.opts.Namespace, obj.GetName()
	var out metav1.Object
	switch obj.(type) {
	case *appsv1.Deployment:
		out, err = f.opts.Client.AppsV1().Deployments(ns).Patch(ctx, name, types.ApplyPatchType, body, opts)
	case *corev1.Service:
		out, err = f.opts.Client.CoreV1().Services(ns).Patch(ctx, name, types.ApplyPatchType, body, opts)
	case *corev1.ConfigMap:
		out, err = f.opts.Client.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.ApplyPatchType, body, opts)
	case *corev1.Secret:
		out, err = f.opts.Client.CoreV1().Secrets(ns).Patch(ctx, name, types.ApplyPatchType, body, opts)
	default:
		return nil, fmt.Errorf("the fleet does not write %T", obj)
	}
	if err != nil {
		return nil, fmt.Errorf("writing %T %s/%s: %w", obj, ns, name, err)
	}
	return out, nil
}

// ensureKey makes the key of Deployment d's replicas once: applying a new
// one on every pass would restart every replica.
func (f *cluster) ensureKey(ctx context.Context, model string, d metav1.Object) error {
	secrets := f.opts.Client.CoreV1().Secrets(f.opts.Namespace)
	if s, err := f.secrets.Secrets(f.opts.Namespace).Get(keySecretName(d.GetName())); err == nil {
		if ownedBy(s, d.GetUID()) {
			return nil
		}
		// The key of a Deployment of the same name before, deleted with
		// its model and about to go with it: this one has its own.
		err := secrets.Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("replacing the replica key of %s: %w", d.GetName(), err)
		}
	}
	_, err := secrets.Create(ctx, f.keySecret(model, d), metav1.CreateOptions{FieldManager: fieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("writing the replica key of %s: %w", d.GetName(), err)
	}
	return nil
}

// ownedBy is whether o is owned by the object of uid.
func ownedBy(o metav1.Object, uid types.UID) bool {
	for _, r := range o.GetOwnerReferences() {
		if r.UID == uid {
			return true
		}
	}
	return false
}

// dropModelKey removes the key a whole model had before keys were per
// Deployment, once no pod of the model reads it and no Deployment of it
// names it: the pods started with it are answered with it until they have
// started afresh with their Deployment's.
func (f *cluster) dropModelKey(ctx context.Context, model string) error {
	name := modelKeySecretName(model)
	if _, err := f.secrets.Secrets(f.opts.Namespace).Get(name); err != nil {
		return nil
	}
	for _, p := range f.modelPods(model) {
		if podKeySecret(p) == name {
			return nil
		}
	}
	// A Deployment naming it at 0 replicas starts pods that read it.
	deps, err := f.deployments.Deployments(f.opts.Namespace).List(labels.SelectorFromSet(labels.Set{labelModel: objName(model)}))
	if err != nil {
		return err
	}
	for _, d := range deps {
		if podKeySecret(&corev1.Pod{Spec: d.Spec.Template.Spec}) == name {
			return nil
		}
	}
	err = f.opts.Client.CoreV1().Secrets(f.opts.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the key %s had before keys were per profile: %w", model, err)
	}
	return nil
}

func (f *cluster) applyMirrorSecret(ctx context.Context) error {
	_, err := f.apply(ctx, &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: MirrorSecret, Namespace: f.opts.Namespace,
			Labels: map[string]string{labelManagedBy: managedBy}},
		StringData: map[string]string{"token": f.opts.MirrorToken},
	})
	return err
}

// modelPods are the pods of a model's Deployments, from the cache.
func (f *cluster) modelPods(name string) []*corev1.Pod {
	pods, _ := f.pods.Pods(f.opts.Namespace).List(labels.SelectorFromSet(labels.Set{labelManagedBy: managedBy, labelModel: objName(name)}))
	return pods
}

// The rate the fleet's client may call the API at: client-go's default for
// a config that sets none is 5 requests a second (bursts of 10), at which a
// pass over 20 models — a ConfigMap, a Service and a Deployment each —
// takes 12 s, and 20 serves at once wait on each other's passes. A
// controller of a few dozen objects is far below what an API server
// serves; kubectl asks for as much.
const (
	ClientQPS   = 50
	ClientBurst = 100
)

// Package kubefleet runs the catalog on a Kubernetes cluster: each model's
// replicas are the pods of a Deployment per profile, placed by the
// cluster's scheduler on its nodes, with the weights fetched from
// modelserve's mirror by an init container.
//
// The local fleet (internal/fleet) runs engines as child processes of one
// machine, and operators with more than one machine had no way past it. Here
// modelserve writes the objects (server-side apply, field manager
// "modelserve") and reads back what the cluster made of them through shared
// informers: the scheduler's own words when a pod has nowhere to go, the
// container's termination message when the engine keeps failing, the
// nodes' allocatable room for the planner. It never polls the API: events
// and a periodic resync put the model's name on a work queue, and one
// worker reconciles it from the informers' caches.
//
// It offers what the rest of modelserve reads of a fleet (Replicas,
// ModelHealth, Nodes, Pool, Serving, EngineKey, Use, ...) in the local
// fleet's types, so jobs, the gateway, the handlers and the planner work
// over either.
package kubefleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/operr"
)

// Options configure a Fleet. Client, Catalog, Namespace, EngineImage,
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
	// MaxFailures is how many restarts of a container that never became
	// ready park its model: 3 unless set.
	MaxFailures int
	// DrainTimeout bounds how long a pod that is to go (stopped or
	// restarted by an operator, or lost to a scale-down) waits for the
	// requests sent to it to end before it is deleted anyway: 10 minutes
	// unless set (--drain-timeout).
	DrainTimeout time.Duration
	// Clock times demand and drains (fleet.Demands, fleet.Drains): the
	// real clock unless set; tests step a fake one.
	Clock clock.WithTickerAndDelayedExecution
	// Residency is the least a pod that was used stays before its model
	// is given back for another model on demand (fleet.Residency):
	// fleet.DefaultResidency unless set; negative keeps none
	// (--residency).
	Residency time.Duration
	// Headroom is what the fleet keeps free of each node's allocatable
	// memory, and of each card's, for the system and other programs, as
	// the local fleet keeps it (fleet.Headroom, --headroom): the
	// scheduler counts only what pods request, and would place a pod in
	// it.
	Headroom fleet.Headroom
	// Resync is how often the informers replay every object, which
	// reconciles every model again: 30 s unless set.
	Resync time.Duration
	Log    *slog.Logger
}

// park is why a model was parked, and for which fingerprint; after an
// operator unparked it, reason is "" and failed are the pods it had then,
// which failed before the cause was fixed. Pods, not a time: a pod's
// creation time is to the second, and a pod that failed in the second
// of the unpark, not yet seen deleted, parked the model again.
type park struct {
	fingerprint, reason string
	failed              map[types.UID]bool
}

// samePark is whether a and b are one park, as read at two moments.
func samePark(a, b park) bool {
	return a.fingerprint == b.fingerprint && a.reason == b.reason && maps.Equal(a.failed, b.failed)
}

// allModels is the queue key that reconciles every model: the catalog's
// and those with objects in the cluster (a model removed).
const allModels = "\x00all"

// Fleet is the catalog on a cluster. Its methods are safe for concurrent
// use; Run starts the informers and the worker.
type Fleet struct {
	*cluster
	queue workqueue.TypedRateLimitingInterface[string]

	// first is closed once the caches have synced, the first time.
	first     chan struct{}
	firstOnce sync.Once

	mu      sync.Mutex
	synced  bool
	models  map[string]fleet.ModelHealth
	demands *fleet.Demands
	// parks are the models parked by this process, by the fingerprint
	// they were parked for: the owner's annotation says the same, but the
	// cache may not have seen it yet when the crashed pod is already gone.
	parks map[string]park
	// known is the catalog as the last pass read it, by name.
	known map[string]catalog.Model
	// lastStops say, by model, which of its pods was last given back to
	// make room, and why; evictions count them by model and why; waiting
	// are the models waiting for busy pods of others to fall idle; memWaits
	// how long models waited for room; heldBack the models given back
	// while asked for, or kept by their Min, held at 0 until their turn
	// (swap.go), and givenWhy why each was given back, for its pods'
	// detail as they go.
	lastStops map[string]fleet.GivenBack
	givenWhy  map[string]string
	// madeRoom are the models room was made or waited for, until their
	// pods are placed.
	madeRoom  map[string]bool
	evictions map[[2]string]int
	waiting   map[string]bool
	// owed are the busy pods the models waiting for room wait on, as
	// each one's last pass found them: they take no request asked after
	// such a model's (Hold, fleet.Owed).
	owed     fleet.Owed
	heldBack map[string]bool
	// givenFor is, by pod, the model it was given back to make room for
	// (swap.go): its room is that model's as it comes back.
	givenFor map[string]string
	memWaits fleet.Waits
	// begun and done count the passes over all models; passed is closed
	// (and replaced) at the end of each, for Sync.
	begun, done int
	passed      chan struct{}
	// drains count the requests in flight on each pod and when each last
	// took one, and drain the pods to go (fleet.Drains); leaving are the
	// pods to go, as they are deleted (drain.go).
	drains  *fleet.Drains
	leaving map[string]*leaving
	// keptFrom is, by model, when the residency of pods a model waits for
	// ends (swap.go): whether they are kept, and when to look again.
	keptFrom map[string]time.Time
	// onStopping are told the endpoint of each pod being deleted.
	onStopping fleet.Listeners[string]
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
	if opts.MaxFailures <= 0 {
		opts.MaxFailures = 3
	}
	if opts.Residency == 0 {
		opts.Residency = fleet.DefaultResidency
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

// New returns a fleet over opts, refusing a missing option by name.
func New(opts Options) (*Fleet, error) {
	opts, err := withDefaults(opts)
	if err != nil {
		return nil, err
	}
	f := &Fleet{
		cluster: &cluster{opts: opts, log: opts.Log},
		queue:  workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		models: map[string]fleet.ModelHealth{}, parks: map[string]park{},
		lastStops: map[string]fleet.GivenBack{}, givenWhy: map[string]string{}, madeRoom: map[string]bool{}, evictions: map[[2]string]int{}, waiting: map[string]bool{}, heldBack: map[string]bool{},
		leaving: map[string]*leaving{}, keptFrom: map[string]time.Time{},
		passed: make(chan struct{}), first: make(chan struct{}),
	}
	f.demands = fleet.NewDemands(opts.Clock, f.queue.Add)
	f.drains = fleet.NewDrains(opts.Clock, opts.DrainTimeout, f.finishDrain)
	return f, nil
}

// Synced is closed once Run has read the cluster (its caches hold the
// nodes, the pods and the fleet's objects) the first time: until then the
// pool is empty.
func (f *Fleet) Synced() <-chan struct{} { return f.first }

// Poke asks the fleet to reconcile every model now. It never blocks.
func (f *Fleet) Poke() { f.queue.Add(allModels) }

// Sync is Poke, waiting until a pass over every model that began after the
// call has ended, or ctx ends, or the fleet is not running.
func (f *Fleet) Sync(ctx context.Context) error {
	f.mu.Lock()
	if !f.synced {
		f.mu.Unlock()
		return nil
	}
	target := f.begun + 1
	f.mu.Unlock()
	f.Poke()
	for {
		f.mu.Lock()
		done, passed := f.done, f.passed
		f.mu.Unlock()
		if done >= target {
			return nil
		}
		select {
		case <-passed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Run starts the informers, waits (at most a minute) for their caches, and
// reconciles until ctx ends. The replicas go on running in the cluster
// after it returns: they are the cluster's, not this process's.
func (f *Fleet) Run(ctx context.Context) error {
	ns := f.opts.Namespace
	ours := informers.NewSharedInformerFactoryWithOptions(f.opts.Client, f.opts.Resync, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = labelManagedBy + "=" + managedBy }))
	// Every pod and node, for what the nodes have left: other pods take
	// room too.
	cluster := informers.NewSharedInformerFactory(f.opts.Client, f.opts.Resync)

	podInf, nodeInf := cluster.Core().V1().Pods(), cluster.Core().V1().Nodes()
	cmInf, secInf, depInf := ours.Core().V1().ConfigMaps(), ours.Core().V1().Secrets(), ours.Apps().V1().Deployments()
	byModel := cache.ResourceEventHandlerFuncs{
		AddFunc:    f.enqueueOwner,
		UpdateFunc: func(_, o any) { f.enqueueOwner(o) },
		DeleteFunc: f.enqueueOwner,
	}
	for _, inf := range []cache.SharedIndexInformer{cmInf.Informer(), depInf.Informer()} {
		if _, err := inf.AddEventHandler(byModel); err != nil {
			return err
		}
	}
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: f.enqueueOwner,
		UpdateFunc: func(old, o any) {
			f.tellStopping(old, o)
			f.enqueueOwner(o)
		},
		DeleteFunc: f.enqueueOwner,
	}); err != nil {
		return err
	}
	// A node come or gone changes where every model can go.
	if _, err := nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { f.Poke() },
		DeleteFunc: func(any) { f.Poke() },
	}); err != nil {
		return err
	}
	f.pods, f.nodes, f.configMaps, f.secrets, f.deployments =
		podInf.Lister(), nodeInf.Lister(), cmInf.Lister(), secInf.Lister(), depInf.Lister()
	_ = secInf.Informer()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ours.Start(ctx.Done())
	cluster.Start(ctx.Done())
	defer func() {
		f.queue.ShutDown()
		ours.Shutdown()
		cluster.Shutdown()
		f.mu.Lock()
		f.synced = false
		f.up.Store(false)
		close(f.passed)
		f.passed = make(chan struct{})
		f.mu.Unlock()
	}()
	wait, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	for _, ok := range ours.WaitForCacheSync(wait.Done()) {
		if !ok {
			return f.unreachable(ctx)
		}
	}
	for _, ok := range cluster.WaitForCacheSync(wait.Done()) {
		if !ok {
			return f.unreachable(ctx)
		}
	}
	if f.opts.MirrorToken != "" {
		if err := f.applyMirrorSecret(ctx); err != nil {
			return err
		}
	}
	f.priorities = f.findPriorityClasses(ctx)
	f.mu.Lock()
	f.synced = true
	f.up.Store(true)
	f.mu.Unlock()
	f.firstOnce.Do(func() { close(f.first) })
	f.Poke()

	done := make(chan struct{})
	go func() {
		defer close(done)
		for f.work(ctx) {
		}
	}()
	<-ctx.Done()
	f.queue.ShutDown()
	<-done
	return nil
}

func (f *cluster) unreachable(ctx context.Context) error {
	if ctx.Err() != nil {
		return nil
	}
	return operr.New(operr.Unavailable, "the cluster's API did not list the fleet's objects within a minute: check --kubeconfig and that modelserve's account may read namespace %s and the nodes (deploy/rbac.yaml)", f.opts.Namespace)
}

// work reconciles the next key; false once the queue is shut down.
func (f *Fleet) work(ctx context.Context) bool {
	key, quit := f.queue.Get()
	if quit {
		return false
	}
	defer f.queue.Done(key)
	var err error
	if key == allModels {
		err = f.reconcileAll(ctx)
	} else {
		err = f.reconcileModel(ctx, key)
	}
	if err != nil && ctx.Err() == nil {
		f.log.Error("reconciling the kubernetes fleet; trying again", "model", key, "err", err)
		f.queue.AddRateLimited(key)
		return true
	}
	f.queue.Forget(key)
	return true
}

// OnStopping has fn called with a pod's endpoint when the pod of a
// replica begins to be deleted, so that whoever keeps connections open to
// its engine (the gateway) closes them: llama-server, stopping, waits for
// the client of each open connection to close it. fn must not block.
func (f *Fleet) OnStopping(fn func(endpoint string)) { f.onStopping.Add(fn) }

// tellStopping tells OnStopping's listeners of a replica's pod whose
// deletion began between old and now.
func (f *Fleet) tellStopping(old, now any) {
	was, ok1 := old.(*corev1.Pod)
	p, ok2 := now.(*corev1.Pod)
	if !ok1 || !ok2 || was.DeletionTimestamp != nil || p.DeletionTimestamp == nil || p.Labels[labelManagedBy] != managedBy {
		return
	}
	endpoint := replica(p).Endpoint
	if endpoint == "" {
		return
	}
	f.onStopping.Tell(endpoint)
}

// enqueueOwner puts the model an object of ours belongs to on the queue.
func (f *Fleet) enqueueOwner(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	o, ok := obj.(metav1.Object)
	if !ok || o.GetLabels()[labelManagedBy] != managedBy || o.GetNamespace() != f.opts.Namespace {
		return
	}
	if name := o.GetAnnotations()[annotationModel]; name != "" {
		f.queue.Add(name)
	}
}

func (f *Fleet) reconcileAll(ctx context.Context) error {
	f.mu.Lock()
	f.begun++
	pass := f.begun
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.done = pass
		close(f.passed)
		f.passed = make(chan struct{})
		f.mu.Unlock()
	}()
	models, err := f.opts.Catalog.List(ctx)
	if err != nil {
		return fmt.Errorf("reading the catalog: %w", err)
	}
	f.remember(models)
	names := map[string]bool{}
	// In turn: a model given room goes before those whose room it keeps.
	for _, m := range f.inTurn(models) {
		names[m.Name] = true
		if err := f.reconcile(ctx, m, models); err != nil {
			return err
		}
	}
	owners, err := f.configMaps.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, o := range owners {
		if name := o.Annotations[annotationModel]; !names[name] {
			if err := f.remove(ctx, name); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *Fleet) reconcileModel(ctx context.Context, name string) error {
	models, err := f.opts.Catalog.List(ctx)
	if err != nil {
		return fmt.Errorf("reading the catalog: %w", err)
	}
	f.remember(models)
	for _, m := range models {
		if m.Name == name {
			return f.reconcile(ctx, m, models)
		}
	}
	return f.remove(ctx, name)
}

// remember keeps the catalog as read, for what the nodes could give back
// (Pool, Nodes) between passes.
func (f *Fleet) remember(models []catalog.Model) {
	byName := make(map[string]catalog.Model, len(models))
	for _, m := range models {
		byName[m.Name] = m
	}
	f.mu.Lock()
	f.known = byName
	f.mu.Unlock()
}

// remove deletes a model's owner; the garbage collector removes what it
// owns (Deployments, their pods, the Service, the Secret). Its pods drain
// first, as those of a Deployment scaled to 0 do (scaledown.go): the owner
// goes once the answers they are streaming have ended, or DrainTimeout
// has passed, and the last drain to end reconciles the model again.
// Deleted at once, the owner took its pods with it, answers and all.
func (f *Fleet) remove(ctx context.Context, name string) error {
	f.mu.Lock()
	delete(f.models, name)
	f.demands.Forget(name)
	delete(f.parks, name)
	delete(f.lastStops, name)
	delete(f.waiting, name)
	f.owed.Owe(name, time.Time{}, nil)
	delete(f.heldBack, name)
	delete(f.givenWhy, name)
	delete(f.madeRoom, name)
	f.mu.Unlock()
	f.memWaits.Forget(name)
	if _, err := f.configMaps.ConfigMaps(f.opts.Namespace).Get(objName(name)); apierrors.IsNotFound(err) {
		return nil
	}
	deps, err := f.deployments.Deployments(f.opts.Namespace).List(labels.SelectorFromSet(labels.Set{labelModel: objName(name)}))
	if err != nil {
		return err
	}
	drained := true
	for _, d := range deps {
		drained = f.drainedAway(ctx, name, d.Name, "its model was removed from the catalog") && drained
	}
	if !drained {
		return nil
	}
	bg := metav1.DeletePropagationBackground
	err = f.opts.Client.CoreV1().ConfigMaps(f.opts.Namespace).Delete(ctx, objName(name), metav1.DeleteOptions{PropagationPolicy: &bg})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing %s from the cluster: %w", name, err)
	}
	f.mu.Lock()
	f.forgetDrainsLocked(func(_ string, l *leaving) bool { return l.model == name })
	f.mu.Unlock()
	f.log.Info("removed a model's objects from the cluster", "model", name)
	return nil
}

// drainedAway is whether every pod of Deployment name, which is to go with
// them, has drained: each holding requests is chosen to go, and the
// Deployment, no longer written, keeps them all until the last has
// drained (scaleDown, to 0).
func (f *Fleet) drainedAway(ctx context.Context, model, name, why string) bool {
	left, _ := f.scaleDown(ctx, model, name, 0, why) // to 0 it deletes nothing, and fails not
	return left == 0
}

// reconcile writes m's objects as the catalog (models) and its pods say
// they should be, and records how it fares.
func (f *Fleet) reconcile(ctx context.Context, m catalog.Model, models []catalog.Model) error {
	ns := f.opts.Namespace
	fp := fleet.Fingerprint(m)
	now := f.opts.Clock.Now()
	h := fleet.ModelHealth{Model: m.Name, Class: m.ClassOrDefault(), Want: f.want(m, now)}
	f.mu.Lock()
	f.lastStops[m.Name].Tell(&h)
	f.mu.Unlock()
	// Parked before (for this fingerprint), parked still; a container
	// that failed MaxFailures times parks the model now.
	f.mu.Lock()
	pk := f.parks[m.Name]
	f.mu.Unlock()
	read := pk
	if pk.fingerprint != fp {
		pk.failed = nil
	}
	obs := observe(f.modelPods(m.Name), f.opts.MaxFailures, pk.failed)
	h.Ready, h.Failures = obs.ready, obs.failures
	if f.demands.Abandoned(m, h.Want, obs.scheduled) {
		f.memWaits.Forget(m.Name)
		h.Want = m.Scaling.Min
	}
	h.HardwareExists = f.hardwareExists(m)

	parkedWhy := ""
	if pk.fingerprint == fp {
		parkedWhy = pk.reason
	} else if cm, err := f.configMaps.ConfigMaps(ns).Get(objName(m.Name)); err == nil && cm.Annotations[annotationParkedFor] == fp {
		parkedWhy = cm.Annotations[annotationParkedWhy]
	}
	w, werr := weightsOf(m, f.opts.MirrorDir)
	if werr == nil {
		werr = f.canRun(m)
	}
	switch {
	case parkedWhy != "":
	case werr != nil:
		parkedWhy = werr.Error()
	case obs.crashed != "":
		parkedWhy = obs.crashed
		f.log.Warn("model parked: its engine keeps failing", "model", m.Name, "reason", parkedWhy)
	}
	parkedFor := ""
	if parkedWhy != "" {
		f.mu.Lock()
		unparked := !samePark(f.parks[m.Name], read)
		if !unparked {
			f.parks[m.Name] = park{fingerprint: fp, reason: parkedWhy}
		}
		f.mu.Unlock()
		if unparked {
			// An operator unparked it while this pass read the park
			// from before: the pass Unpark queued reads it anew.
			return nil
		}
		h.Parked, h.Reason, parkedFor = true, parkedWhy, fp
	}

	owner, err := f.apply(ctx, f.ownerMap(m, parkedFor, parkedWhy))
	if err != nil {
		return err
	}
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.GetName(), UID: owner.GetUID()}
	if _, err := f.apply(ctx, f.service(m, ref)); err != nil {
		return err
	}

	// The preferred profile runs what is wanted; replicas its pods could
	// not be placed with are tried on the next.
	keep := map[string]bool{}
	making, hold := "", false
	if werr == nil && !h.Parked {
		// The models given back for m are scaled to 0 first: the
		// scheduler places m's pod once theirs have gone.
		var given []catalog.Model
		given, making, hold = f.makeRoom(m, h.Want, models, now)
		f.mu.Lock()
		h.ResidencyEnds = f.keptFrom[m.Name]
		f.mu.Unlock()
		for _, g := range given {
			if err := f.reconcile(ctx, g, models); err != nil {
				return err
			}
		}
	}
	if werr == nil {
		remaining := int32(h.Want)
		if h.Parked || f.isHeldBack(m.Name) {
			remaining = 0
		}
		why := f.scaleWhy(m.Name, int(remaining), h.Parked)
		if hold && remaining > int32(obs.scheduled) {
			// The room it could take now is kept for models asked for
			// before it: a pod of it waiting for the scheduler would
			// take that room as it came free.
			remaining, why = int32(obs.scheduled), making
		}
		if remaining > 0 {
			f.mu.Lock()
			delete(f.givenWhy, m.Name) // it runs again: what gave it back is past
			f.mu.Unlock()
		}
		for _, pi := range byPriority(m) {
			name := deploymentName(m.Name, pi)
			keep[name] = true
			// Its pods to go drain first: the Deployment keeps them
			// until they have (scaledown.go).
			replicas, err := f.scaleDown(ctx, m.Name, name, remaining, why)
			if err != nil {
				return fmt.Errorf("deleting a drained pod of %s: %w", m.Name, err)
			}
			// Its pods of a template since changed drain first: it is
			// written once they have (scaledown.go).
			d := f.deployment(m, pi, replicas, w, ref, f.products(m.Profiles[pi].GPUClass))
			ok, err := f.rolled(ctx, m.Name, d)
			if err != nil {
				return err
			}
			if ok {
				written, err := f.apply(ctx, d)
				if err != nil {
					return err
				}
				// After the Deployment, which owns it: a pod made
				// meanwhile waits for it, as a kubelet holds back a
				// container whose Secret is not there yet.
				if err := f.ensureKey(ctx, m.Name, written); err != nil {
					return err
				}
			}
			remaining = min(remaining, int32(obs.unschedulable[name]))
		}
	}
	f.mu.Lock()
	madeRoom := f.madeRoom[m.Name]
	f.mu.Unlock()
	// The pass's calls to the API server take a while, in which the
	// scheduler may place the pod it began by seeing turned away: its
	// placement is said from the pods as they are now. Said from the
	// first look, a pod placed meanwhile (which makeRoom, reading anew,
	// saw placed) was the scheduler's old "Insufficient memory" with no
	// room left for it, and its wait for memory was dropped untallied.
	obs = observe(f.modelPods(m.Name), f.opts.MaxFailures, pk.failed)
	switch {
	case making != "" && !strings.HasPrefix(making, fleet.Making):
		// Held back from the headroom: nothing it waits for will give it
		// room.
		h.Unplaceable, h.Placement = true, making
		f.memWaits.Forget(m.Name)
		f.setMadeRoom(m.Name, false)
	case making != "":
		// Waiting for room being made is not being unplaceable.
		h.Placement = making
		f.memWaits.Waiting(m.Name, now)
		f.setMadeRoom(m.Name, true)
	case madeRoom && obs.placement != "" && !h.Parked && obs.scheduled < h.Want && f.roomNow(m):
		// The room made for it is free, and the scheduler has not tried
		// its pod again yet: what it said before is past.
		h.Placement = "making room: the room is free; waiting for the scheduler to place its pod"
	case obs.placement != "" && !h.Parked && obs.scheduled < h.Want:
		h.Unplaceable, h.Placement = true, obs.placement
		f.memWaits.Forget(m.Name)
		f.setMadeRoom(m.Name, false)
	case h.Want == 0:
		f.memWaits.Forget(m.Name) // nobody waits for it now
		f.setMadeRoom(m.Name, false)
	case obs.scheduled >= h.Want:
		f.memWaits.Placed(m.Name, f.opts.Clock.Now()) // a wait it had ends as its pod is placed
		f.setMadeRoom(m.Name, false)
	}
	// Profiles no longer in the entry.
	deps, err := f.deployments.Deployments(ns).List(labels.SelectorFromSet(labels.Set{labelModel: objName(m.Name)}))
	if err != nil {
		return err
	}
	for _, d := range deps {
		// Its pods drain first: it is deleted once they have.
		if !keep[d.Name] && f.drainedAway(ctx, m.Name, d.Name, "its profile was removed from its model's catalog entry") {
			if err := f.opts.Client.AppsV1().Deployments(ns).Delete(ctx, d.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			f.mu.Lock()
			f.forgetDrainsLocked(func(_ string, l *leaving) bool { return l.deployment == d.Name })
			f.mu.Unlock()
		}
	}
	if err := f.dropModelKey(ctx, m.Name); err != nil {
		return err
	}
	f.mu.Lock()
	f.models[m.Name] = h
	f.mu.Unlock()
	return nil
}

// apply writes obj by server-side apply as the field manager "modelserve":
// the fields it sets are its own, and a field it stops setting goes.
func (f *cluster) apply(ctx context.Context, obj metav1.Object) (metav1.Object, error) {
	return f.applyAs(ctx, obj, false)
}

// applyAs is apply, or with dryRun what apply would write, written not.
func (f *cluster) applyAs(ctx context.Context, obj metav1.Object, dryRun bool) (metav1.Object, error) {
	body, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	opts := metav1.PatchOptions{FieldManager: fieldManager, Force: ptr(true)}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
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
	if _, err := f.secrets.Secrets(f.opts.Namespace).Get(keySecretName(d.GetName())); err == nil {
		return nil
	}
	_, err := f.opts.Client.CoreV1().Secrets(f.opts.Namespace).Create(ctx, f.keySecret(model, d), metav1.CreateOptions{FieldManager: fieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("writing the replica key of %s: %w", d.GetName(), err)
	}
	return nil
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

// EngineKey is the key replica id's engine wants; "" for a replica the
// fleet does not have.
func (f *Fleet) EngineKey(id string) string {
	if !f.running() {
		return ""
	}
	p, err := f.pods.Pods(f.opts.Namespace).Get(id)
	if err != nil || p.Labels[labelManagedBy] != managedBy {
		return ""
	}
	s, err := f.secrets.Secrets(f.opts.Namespace).Get(podKeySecret(p))
	if err != nil {
		return ""
	}
	return string(s.Data[keySecretKey])
}

func (f *Fleet) running() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.synced
}

// Starts are the engine starts with their memory; the cluster's pods are
// not measured, so there are none.
func (f *Fleet) Starts(context.Context, int) ([]fleet.Start, error) { return nil, nil }

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

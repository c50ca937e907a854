package kubefleet

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"modelserve/catalog"
	"modelserve/internal/fleet"
)

// Backend is the cluster as the fleet's backend (fleet.Backend): the
// controller in internal/fleet decides what runs, where and when it
// goes, and the Backend writes it as the Deployments of each model's
// profiles, and reads back what their pods do. Each replica the
// controller starts is one more replica of its profile's Deployment, and
// is answered for by the next pod of that Deployment (pods are named by
// their ReplicaSet, not by the controller); one it stops has its pod
// deleted, then its Deployment lowered by one.
type Backend struct {
	*cluster
	ev fleet.Events
	// first is closed once the caches have synced, the first time.
	first     chan struct{}
	firstOnce sync.Once
	// kick has the worker look at the pods and the replicas now.
	kick chan struct{}
	wg   sync.WaitGroup

	mu sync.Mutex
	// steps counts the worker's steps begun and done; stepped is closed
	// (and replaced) at the end of each, for Sync.
	begun, done int
	stepped     chan struct{}
	reps        map[string]*kreplica
	// byPod is the replica each paired pod answers for, by pod name.
	byPod map[string]string
	deps  map[string]*kdep
	seq   int
}

// kdep is a profile's Deployment as the controller last started a
// replica of it: the catalog entry it is written from.
type kdep struct {
	m     catalog.Model
	pi    int
	known bool // m is the entry (a Deployment adopted of a model gone has none)
	dirty bool
}

// kreplica is one of the controller's replicas, and the pod that answers
// for it.
type kreplica struct {
	id, model, deployment, fingerprint string
	seq                                int
	// pod is the pod paired with it, "" until its Deployment has made
	// one; uid tells that pod from another of the same name.
	pod      string
	uid      types.UID
	endpoint string
	// stopping: Stop was asked; deleted: its pod was deleted (or it had
	// none) and its Deployment lowered; restart: Restart was asked.
	stopping, deleted, restart bool
	// parked is why its model was parked as its pod kept failing: it
	// ends Failed.
	parked string
	// Told to the controller: ready (at readyAt), stable, and restarts
	// counted as failures.
	ready, stable bool
	readyAt       time.Time
	restarts      int
	lastError     string
	lines         []string
}

// logLines bounds a replica's log: modelserve's own notes (the engine's
// output is the cluster's, kubectl logs).
const logLines = 50

// NewBackend is the cluster of opts as a fleet backend: give its Attach
// to fleet.Options.Backend, and its Parks to fleet.Options.Parks.
func NewBackend(opts Options) (*Backend, error) {
	opts, err := withDefaults(opts)
	if err != nil {
		return nil, err
	}
	return &Backend{cluster: &cluster{opts: opts, log: opts.Log}, first: make(chan struct{}), kick: make(chan struct{}, 1), stepped: make(chan struct{}),
		reps: map[string]*kreplica{}, byPod: map[string]string{}, deps: map[string]*kdep{}}, nil
}

// Attach is the backend told the controller's events (fleet.Options.Backend).
func (b *Backend) Attach(ev fleet.Events) fleet.Backend {
	b.ev = ev
	return b
}

// Synced is closed once the fleet's Run has read the cluster the first
// time: until then it has no nodes.
func (b *Backend) Synced() <-chan struct{} { return b.first }

func (b *Backend) poke() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// Nodes are the cluster's nodes, each with its allocatable room, what
// is available of it being what pods other than the fleet's do not
// request: the replicas' are the controller's to count, and a pod of the
// fleet's answering for none is one its ReplicaSet made for a moment, as
// a replica's pod was deleted before its Deployment was lowered, which
// the lowered count deletes.
func (b *Backend) Nodes() []fleet.NodeInfo {
	if !b.up.Load() {
		return nil
	}
	ns, _ := b.nodes.List(labels.Everything())
	pods, _ := b.pods.List(labels.Everything())
	other := map[string]int64{}
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.Namespace == b.opts.Namespace && p.Labels[labelManagedBy] == managedBy {
			continue
		}
		_, mem, _ := requests(p, b.opts.GPUResource)
		other[p.Spec.NodeName] += mem
	}
	out := make([]fleet.NodeInfo, 0, len(ns))
	for _, n := range ns {
		a := n.Status.Allocatable
		gpus := a[b.opts.GPUResource]
		product := n.Labels[b.opts.GPUProductLabel]
		mem := a.Memory().Value()
		c := fleet.Capacity{CPUCores: int(a.Cpu().Value()), RAMBytes: mem, AvailableBytes: max(0, mem-other[n.Name])}
		for j := range gpus.Value() {
			c.GPUs = append(c.GPUs, fleet.Card{Index: int(j), Class: classOf(product), MemoryBytes: cardBytes(n, product)})
		}
		out = append(out, fleet.NodeInfo{Name: n.Name, Capacity: c})
	}
	slices.SortFunc(out, func(a, b fleet.NodeInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Runs is what a pod of m runs beyond its catalog entry
// (fleet.Runner): the PriorityClass its class names, and the images of
// its engines. A change of them replaces its pods, each drained, as a
// changed entry does: written at once, the Deployment's new template
// would roll every pod, answers and all.
func (b *Backend) Runs(m catalog.Model) string {
	parts := []string{b.priorityClass(m)}
	for _, p := range m.Profiles {
		image, _, _ := b.engine(m, p, weights{})
		parts = append(parts, image)
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, "\n")))
	return hex.EncodeToString(sum[:4])
}

// runsFingerprint is what the controller starts a replica of m with
// (fleet.Placement's Fingerprint): its entry's and its Runs.
func (b *Backend) runsFingerprint(m catalog.Model) string {
	return fleet.Fingerprint(m) + "+" + b.Runs(m)
}

// podRuns is what pod p of m's profile pi runs, as runsFingerprint says
// it: its template's entry, and m's Runs if it runs what m's pods run
// now (its PriorityClass and its engine's image), else what it ran
// before.
func (b *Backend) podRuns(p *corev1.Pod, m catalog.Model, pi int) string {
	image, _, _ := b.engine(m, m.Profiles[pi], weights{})
	runs := "before"
	for _, c := range p.Spec.Containers {
		if c.Name == "engine" && c.Image == image && p.Spec.PriorityClassName == b.priorityClass(m) {
			runs = b.Runs(m)
		}
	}
	return p.Annotations[annotationFinger] + "+" + runs
}

// Check is why m cannot run on the cluster: its weights not on the
// mirror the pods fetch from, or its engine's image not configured.
func (b *Backend) Check(m catalog.Model) error {
	if m.Name == "" {
		return nil // the images are the cluster's to pull
	}
	if _, err := weightsOf(m, b.opts.MirrorDir); err != nil {
		return err
	}
	return b.canRun(m)
}

// Start has one more replica of p's profile's Deployment: the worker
// writes it, and pairs the replica with the next pod it makes.
func (b *Backend) Start(_ context.Context, p fleet.Placement) error {
	pi := slices.IndexFunc(p.Model.Profiles, func(q catalog.Profile) bool { return q.Name == p.Profile.Name })
	if pi < 0 {
		return fmt.Errorf("%s has no profile named %s", p.Model.Name, p.Profile.Name)
	}
	dep := deploymentName(p.Model.Name, pi)
	b.mu.Lock()
	b.seq++
	b.reps[p.ID] = &kreplica{id: p.ID, model: p.Model.Name, deployment: dep, fingerprint: p.Fingerprint, seq: b.seq}
	b.deps[dep] = &kdep{m: p.Model, pi: pi, known: true, dirty: true}
	b.mu.Unlock()
	b.poke()
	return nil
}

// Stop deletes replica id's pod and lowers its Deployment by one.
func (b *Backend) Stop(id, why string) {
	b.mu.Lock()
	if r := b.reps[id]; r != nil && !r.stopping {
		r.stopping = true
		r.note("modelserve: stopping: " + why)
	}
	b.mu.Unlock()
	b.poke()
}

// Restart deletes replica id's pod alone: its ReplicaSet makes another,
// which answers for it.
func (b *Backend) Restart(id, why string) {
	b.mu.Lock()
	if r := b.reps[id]; r != nil && !r.stopping {
		r.restart = true
		r.note("modelserve: " + why)
	}
	b.mu.Unlock()
	b.poke()
}

// Observe is what replica id's pod is doing.
func (b *Backend) Observe(id string) (fleet.Observation, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.reps[id]
	if r == nil {
		return fleet.Observation{}, false
	}
	o := fleet.Observation{State: fleet.Starting, Failures: r.restarts, LastError: r.lastError, Engine: "llamacpp"}
	if r.pod == "" {
		o.Detail = "placing: waiting for its Deployment's next pod"
		switch {
		case r.restart:
			o.Detail = "restarting: its pod is being deleted"
		case b.waitsForFormerLocked(r):
			o.Detail = "placing: waiting for the pods of what its model ran before to drain and go; its Deployment is rewritten then"
		}
		return o, true
	}
	p, err := b.pods.Pods(b.opts.Namespace).Get(r.pod)
	if err != nil || p.UID != r.uid {
		o.Detail = "placing: its pod has gone; waiting for its Deployment's next"
		return o, true
	}
	rep := replica(p)
	o.State, o.Detail, o.Node, o.Endpoint = rep.State, rep.Detail, rep.Node, rep.Endpoint
	o.Started, o.ReadyAt, o.Threads, o.Engine = rep.Started, rep.ReadyAt, rep.Threads, rep.Engine
	if rep.LastError != "" {
		o.LastError = rep.LastError
	}
	if s, err := b.secrets.Secrets(b.opts.Namespace).Get(podKeySecret(p)); err == nil {
		o.Key = string(s.Data[keySecretKey])
	}
	return o, true
}

// waitsForFormerLocked is whether r's Deployment still has replicas of
// what its model ran before (writeDeployments): its template is not
// rewritten for r until they have gone. b.mu is held.
func (b *Backend) waitsForFormerLocked(r *kreplica) bool {
	for _, o := range b.reps {
		if o.deployment == r.deployment && !o.deleted && o.fingerprint != r.fingerprint {
			return true
		}
	}
	return false
}

// Log is modelserve's notes on replica id.
func (b *Backend) Log(id string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.reps[id]; r != nil {
		return slices.Clone(r.lines)
	}
	return nil
}

// Note adds a line to replica id's log.
func (b *Backend) Note(id, line string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.reps[id]; r != nil {
		r.note(line)
	}
}

func (r *kreplica) note(line string) {
	r.lines = append(r.lines, line)
	if len(r.lines) > logLines {
		r.lines = slices.Delete(r.lines, 0, len(r.lines)-logLines)
	}
}

// Sync waits until the worker has written what the controller asked of
// it so far (the fleet's Sync waits for it): a step begun after the call has ended, or
// ctx has.
func (b *Backend) Sync(ctx context.Context) error {
	if !b.up.Load() {
		return nil // not reading the cluster: there is no worker to wait for
	}
	b.mu.Lock()
	target := b.begun + 1
	b.mu.Unlock()
	b.poke()
	for {
		b.mu.Lock()
		done, stepped := b.done, b.stepped
		b.mu.Unlock()
		if done >= target {
			return nil
		}
		select {
		case <-stepped:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Wait returns once the worker and the informers have stopped.
func (b *Backend) Wait() { b.wg.Wait() }

// Outlives: pods are the cluster's, and go on running after modelserve.
func (b *Backend) Outlives() bool { return true }

// Open reads the cluster for the Run of ctx (fleet.Opener): its caches
// are kept until ctx ends.
func (b *Backend) Open(ctx context.Context) error {
	if err := b.watch(ctx); err != nil {
		return err
	}
	b.firstOnce.Do(func() { close(b.first) })
	return nil
}

// Adopt starts the worker for the Run of ctx, and takes back the fleet's
// pods the cluster has, each as a replica named by its pod.
func (b *Backend) Adopt(ctx context.Context) []fleet.Adopted {
	b.mu.Lock()
	b.reps, b.byPod, b.deps = map[string]*kreplica{}, map[string]string{}, map[string]*kdep{}
	b.begun, b.done = 0, 0
	b.mu.Unlock()
	if !b.up.Load() {
		return nil // Open did not read the cluster
	}
	models, err := b.opts.Catalog.List(ctx)
	if err != nil {
		b.log.Error("reading the catalog to take back the fleet's pods", "err", err)
	}
	byName := map[string]catalog.Model{}
	for _, m := range models {
		byName[m.Name] = m
	}
	pods, _ := b.pods.Pods(b.opts.Namespace).List(labels.SelectorFromSet(labels.Set{labelManagedBy: managedBy}))
	slices.SortFunc(pods, func(x, y *corev1.Pod) int { return strings.Compare(x.Name, y.Name) })
	var out []fleet.Adopted
	b.mu.Lock()
	for _, p := range pods {
		model, dep := p.Annotations[annotationModel], p.Labels[labelDeployment]
		pi, err := strconv.Atoi(dep[strings.LastIndex(dep, "-p")+2:])
		if !active(p) || model == "" || err != nil {
			continue
		}
		a := fleet.Adopted{ID: p.Name, Model: model, Fingerprint: p.Annotations[annotationFinger], Node: p.Spec.NodeName}
		d := &kdep{pi: pi, dirty: true}
		if m, ok := byName[model]; ok && pi < len(m.Profiles) {
			a.Profile, d.m, d.known = m.Profiles[pi].Name, m, true
			a.Fingerprint = b.podRuns(p, m, pi)
		}
		for _, c := range p.Spec.Containers {
			if c.Name == "engine" {
				a.MemBytes = c.Resources.Requests.Memory().Value()
			}
		}
		if b.deps[dep] == nil || d.known {
			b.deps[dep] = d
		}
		b.seq++
		b.reps[p.Name] = &kreplica{id: p.Name, model: model, deployment: dep, fingerprint: a.Fingerprint, seq: b.seq, pod: p.Name, uid: p.UID}
		b.byPod[p.Name] = p.Name
		out = append(out, a)
	}
	b.mu.Unlock()
	b.wg.Add(1)
	go b.work(ctx)
	return out
}

// active is whether the ReplicaSet controller counts p: not being
// deleted, not ended.
func active(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// watch starts the informers for ctx and waits (at most a minute) for
// their caches: the nodes and every pod, for the room each node has, and
// the fleet's own objects. The mirror's token is written, and whether
// the cluster has the PriorityClasses pods name is found.
func (b *Backend) watch(ctx context.Context) error {
	ns := b.opts.Namespace
	ours := informers.NewSharedInformerFactoryWithOptions(b.opts.Client, b.opts.Resync, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = labelManagedBy + "=" + managedBy }))
	all := informers.NewSharedInformerFactory(b.opts.Client, b.opts.Resync)
	podInf, nodeInf := all.Core().V1().Pods(), all.Core().V1().Nodes()
	cmInf, secInf, depInf := ours.Core().V1().ConfigMaps(), ours.Core().V1().Secrets(), ours.Apps().V1().Deployments()
	look := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { b.poke() },
		UpdateFunc: func(_, _ any) { b.poke() },
		DeleteFunc: func(any) { b.poke() },
	}
	if _, err := podInf.Informer().AddEventHandler(look); err != nil {
		return err
	}
	b.pods, b.nodes, b.configMaps, b.secrets, b.deployments =
		podInf.Lister(), nodeInf.Lister(), cmInf.Lister(), secInf.Lister(), depInf.Lister()
	_ = secInf.Informer()
	ours.Start(ctx.Done())
	all.Start(ctx.Done())
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		<-ctx.Done()
		b.up.Store(false)
		ours.Shutdown()
		all.Shutdown()
	}()
	wait, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	for _, synced := range []map[any]bool{anyMap(ours.WaitForCacheSync(wait.Done())), anyMap(all.WaitForCacheSync(wait.Done()))} {
		for _, ok := range synced {
			if !ok {
				return b.unreachable(ctx)
			}
		}
	}
	if b.opts.MirrorToken != "" {
		if err := b.applyMirrorSecret(ctx); err != nil {
			return err
		}
	}
	b.priorities = b.findPriorityClasses(ctx)
	b.up.Store(true)
	return nil
}

func anyMap[K comparable](m map[K]bool) map[any]bool {
	out := make(map[any]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// work writes the Deployments and deletes the pods the replicas ask for,
// and tells the controller what their pods do, until ctx ends.
func (b *Backend) work(ctx context.Context) {
	defer b.wg.Done()
	defer func() {
		// No step is to come: nobody waits for one (Sync).
		b.mu.Lock()
		b.done = math.MaxInt
		close(b.stepped)
		b.stepped = make(chan struct{})
		b.mu.Unlock()
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var collected time.Time
	for {
		b.step(ctx)
		if now := time.Now(); now.Sub(collected) >= min(b.opts.Resync, 5*time.Second) {
			b.collect(ctx)
			collected = now
		}
		select {
		case <-ctx.Done():
			return
		case <-b.kick:
		case <-tick.C:
		}
	}
}

// collect deletes the objects of the models gone from the catalog, and
// the Deployments of profiles gone from a model's entry, once no replica
// of them is left: the controller drains and stops those first. A
// model's owner goes with its Deployments, its Service and its keys (the
// garbage collector deletes what it owns); a model's key of before keys
// were per Deployment goes once no pod reads it (dropModelKey).
func (b *Backend) collect(ctx context.Context) {
	models, err := b.opts.Catalog.List(ctx)
	if err != nil {
		return
	}
	byName := map[string]catalog.Model{}
	for _, m := range models {
		byName[m.Name] = m
	}
	ns := b.opts.Namespace
	owners, _ := b.configMaps.ConfigMaps(ns).List(labels.Everything())
	deps, _ := b.deployments.Deployments(ns).List(labels.Everything())
	b.mu.Lock()
	heldModel, heldDep := map[string]bool{}, map[string]bool{}
	for _, r := range b.reps {
		heldModel[r.model], heldDep[r.deployment] = true, true
	}
	b.mu.Unlock()
	b.verify()
	bg := metav1.DeletePropagationBackground
	for _, o := range owners {
		name := o.Annotations[annotationModel]
		if _, ok := byName[name]; ok {
			// The key a whole model had before keys were per
			// Deployment goes once no pod reads it.
			if err := b.dropModelKey(ctx, name); err != nil {
				b.log.Error("removing a model's key of before; trying again", "model", name, "err", err)
			}
			continue
		}
		if name == "" || heldModel[name] {
			continue
		}
		err := b.opts.Client.CoreV1().ConfigMaps(ns).Delete(ctx, o.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
		if err != nil && !apierrors.IsNotFound(err) {
			b.log.Error("removing a model's objects from the cluster; trying again", "model", name, "err", err)
			continue
		}
		b.log.Info("removed a model's objects from the cluster", "model", name)
	}
	for _, d := range deps {
		m, ok := byName[d.Annotations[annotationModel]]
		if !ok || heldDep[d.Name] || slices.ContainsFunc(byPriority(m), func(pi int) bool { return deploymentName(m.Name, pi) == d.Name }) {
			continue
		}
		err := b.opts.Client.AppsV1().Deployments(ns).Delete(ctx, d.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			b.log.Error("removing the Deployment of a profile gone from its model's entry; trying again", "deployment", d.Name, "err", err)
		}
	}
}

// event is one thing to tell the controller, told without the
// backend's lock.
type event func(ev fleet.Events)

// step does what the replicas ask of the cluster, pairs the pods made
// since with the replicas waiting for one, and tells the controller what
// changed.
func (b *Backend) step(ctx context.Context) {
	type deletion struct {
		id, pod, endpoint string
		uid               types.UID
	}
	var dels []deletion
	var events []event
	b.mu.Lock()
	b.begun++
	defer func() {
		b.mu.Lock()
		b.done++
		close(b.stepped)
		b.stepped = make(chan struct{})
		b.mu.Unlock()
	}()
	for _, r := range b.reps {
		switch {
		case r.restart && r.pod != "":
			dels = append(dels, deletion{r.id, r.pod, r.endpoint, r.uid})
			delete(b.byPod, r.pod)
			r.pod, r.uid, r.endpoint, r.ready, r.stable = "", "", "", false, false
			r.restart = false
		case r.restart:
			r.restart = false
		case r.stopping && !r.deleted:
			r.deleted = true
			if d := b.deps[r.deployment]; d != nil {
				d.dirty = true
			}
			if r.pod != "" {
				dels = append(dels, deletion{r.id, r.pod, r.endpoint, r.uid})
				continue
			}
			events = append(events, b.endLocked(r))
		}
	}
	b.mu.Unlock()
	for _, d := range dels {
		if d.endpoint != "" {
			b.ev.Stopping(d.endpoint)
		}
		err := b.opts.Client.CoreV1().Pods(b.opts.Namespace).Delete(ctx, d.pod, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &d.uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
			b.log.Error("deleting a replica's pod; trying again", "replica", d.id, "pod", d.pod, "err", err)
		}
	}
	b.writeDeployments(ctx)
	events = append(events, b.pair()...)
	for _, e := range events {
		e(b.ev)
	}
}

// endLocked forgets replica r, whose pod has gone, and is the event
// telling the controller so.
func (b *Backend) endLocked(r *kreplica) event {
	delete(b.reps, r.id)
	if b.byPod[r.pod] == r.id {
		delete(b.byPod, r.pod)
	}
	last := fleet.Observation{State: fleet.Stopped, Failures: r.restarts, LastError: r.lastError}
	if r.parked != "" {
		last.State, last.Detail = fleet.Failed, r.parked
	}
	lines := slices.Clone(r.lines)
	return func(ev fleet.Events) { ev.Ended(r.id, last, lines) }
}

// writeDeployments writes each Deployment whose replicas changed with as
// many as it has replicas not stopped. A replica of a changed entry
// waits while those of the entry before it are there: the Deployment is
// written with the new template once they have gone, since writing it
// replaces every pod of it at once, draining or not.
func (b *Backend) writeDeployments(ctx context.Context) {
	type write struct {
		name     string
		d        kdep
		replicas int32
		scale    bool // only its replicas: its template is not to change yet
	}
	var writes []write
	b.mu.Lock()
	for name, d := range b.deps {
		if !d.dirty {
			continue
		}
		d.dirty = false
		fp := ""
		if d.known {
			fp = b.runsFingerprint(d.m)
		}
		var now, former int32
		for _, r := range b.reps {
			if r.deployment != name || r.deleted {
				continue
			}
			if r.fingerprint == fp {
				now++
			} else {
				former++
			}
		}
		if former > 0 || !d.known {
			writes = append(writes, write{name: name, d: *d, replicas: former, scale: true})
		} else {
			writes = append(writes, write{name: name, d: *d, replicas: now})
		}
	}
	b.mu.Unlock()
	for _, w := range writes {
		var err error
		if w.scale {
			err = b.scale(ctx, w.name, w.replicas)
		} else {
			err = b.writeProfile(ctx, w.d.m, w.d.pi, w.replicas)
		}
		if err != nil && ctx.Err() == nil {
			b.log.Error("writing a model's Deployment; trying again", "deployment", w.name, "err", err)
			b.mu.Lock()
			if d := b.deps[w.name]; d != nil {
				d.dirty = true
			}
			b.mu.Unlock()
		}
	}
}

// verify has each Deployment with replicas written again when the
// cluster no longer has it as it was written: deleted meanwhile (its
// model removed and served again in the moment its objects were being
// deleted, or by an operator), at another count, or without its key.
func (b *Backend) verify() {
	ns := b.opts.Namespace
	b.mu.Lock()
	defer b.mu.Unlock()
	want := map[string]int32{}
	for _, r := range b.reps {
		if !r.deleted {
			want[r.deployment]++
		}
	}
	for name, n := range want {
		d := b.deps[name]
		if d == nil || d.dirty || !d.known {
			continue
		}
		dep, err := b.deployments.Deployments(ns).Get(name)
		if err != nil || dep.DeletionTimestamp != nil || dep.Spec.Replicas == nil || *dep.Spec.Replicas != n && !b.formerLocked(name, d) {
			d.dirty = true
			continue
		}
		if s, err := b.secrets.Secrets(ns).Get(podKeySecret(&corev1.Pod{Spec: dep.Spec.Template.Spec})); err != nil ||
			s.Name == keySecretName(name) && !ownedBy(s, dep.UID) {
			d.dirty = true
		}
	}
	if len(want) > 0 {
		b.poke()
	}
}

// formerLocked is whether Deployment name has replicas of what its model
// ran before d's entry: it is written at their count then, not at all of
// its replicas'. b.mu is held.
func (b *Backend) formerLocked(name string, d *kdep) bool {
	fp := b.runsFingerprint(d.m)
	for _, r := range b.reps {
		if r.deployment == name && !r.deleted && r.fingerprint != fp {
			return true
		}
	}
	return false
}

// scale sets Deployment name's replicas alone.
func (b *Backend) scale(ctx context.Context, name string, replicas int32) error {
	d, err := b.deployments.Deployments(b.opts.Namespace).Get(name)
	if apierrors.IsNotFound(err) || err == nil && d.Spec.Replicas != nil && *d.Spec.Replicas == replicas {
		return nil
	}
	body := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	_, err = b.opts.Client.AppsV1().Deployments(b.opts.Namespace).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: fieldManager})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// writeProfile writes the objects of m's profile pi with replicas
// replicas: its owner, its Service, its Deployment and its key.
func (c *cluster) writeProfile(ctx context.Context, m catalog.Model, pi int, replicas int32) error {
	w, err := weightsOf(m, c.opts.MirrorDir)
	if err != nil {
		return err
	}
	owner, err := c.apply(ctx, c.ownerMap(m))
	if err != nil {
		return err
	}
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.GetName(), UID: owner.GetUID()}
	if _, err := c.apply(ctx, c.service(m, ref)); err != nil {
		return err
	}
	d := c.deployment(m, pi, replicas, w, ref, c.products(m.Profiles[pi].GPUClass))
	written, err := c.apply(ctx, d)
	if err != nil {
		return err
	}
	// After the Deployment, which owns it: a pod made meanwhile waits for
	// it, as a kubelet holds back a container whose Secret is not there
	// yet.
	if err := c.ensureKey(ctx, m.Name, written); err != nil {
		return err
	}
	return c.dropModelKey(ctx, m.Name)
}

// pair pairs each Deployment's pods made since with its replicas waiting
// for one, in the order each was made and started, forgets the replicas
// whose pods have gone, and is what the controller is to be told of the
// pods' changes.
func (b *Backend) pair() []event {
	now := b.opts.Clock.Now()
	var events []event
	b.mu.Lock()
	defer b.mu.Unlock()
	waiting := map[string][]*kreplica{}
	for _, r := range b.reps {
		if r.pod == "" && !r.deleted && r.parked == "" {
			waiting[r.deployment] = append(waiting[r.deployment], r)
		}
	}
	for dep, rs := range waiting {
		slices.SortFunc(rs, func(x, y *kreplica) int { return cmp.Compare(x.seq, y.seq) })
		pods, _ := b.pods.Pods(b.opts.Namespace).List(labels.SelectorFromSet(labels.Set{labelManagedBy: managedBy, labelDeployment: dep}))
		slices.SortFunc(pods, func(x, y *corev1.Pod) int {
			return cmp.Or(x.CreationTimestamp.Compare(y.CreationTimestamp.Time), strings.Compare(x.Name, y.Name))
		})
		for _, p := range pods {
			if !active(p) || b.byPod[p.Name] != "" {
				continue
			}
			// A pod runs what its replica was started with: not a pod
			// of the template before, which its ReplicaSet may still
			// make for a moment.
			runs := p.Annotations[annotationFinger]
			if d := b.deps[dep]; d != nil && d.known {
				runs = b.podRuns(p, d.m, d.pi)
			}
			i := slices.IndexFunc(rs, func(r *kreplica) bool {
				if !strings.Contains(runs, "+") {
					entry, _, _ := strings.Cut(r.fingerprint, "+")
					return entry == runs
				}
				return r.fingerprint == runs
			})
			if i < 0 {
				continue
			}
			r := rs[i]
			rs = slices.Delete(rs, i, i+1)
			r.pod, r.uid = p.Name, p.UID
			r.restarts = restartsOf(p) // the ReplicaSet's new pod starts afresh
			b.byPod[p.Name] = r.id
			r.note("modelserve: its pod is " + p.Name)
		}
	}
	for _, r := range b.reps {
		if r.pod == "" {
			continue
		}
		p, err := b.pods.Pods(b.opts.Namespace).Get(r.pod)
		if err != nil || p.UID != r.uid {
			if r.deleted {
				events = append(events, b.endLocked(r))
				continue
			}
			// Deleted by another (evicted, preempted, an operator's
			// kubectl): its ReplicaSet makes another, which answers for it.
			delete(b.byPod, r.pod)
			r.pod, r.uid, r.endpoint, r.ready, r.stable = "", "", "", false, false
			if d := b.deps[r.deployment]; d != nil {
				d.dirty = true
			}
			continue
		}
		if r.deleted {
			continue
		}
		rep := replica(p)
		if p.DeletionTimestamp != nil && r.endpoint != "" {
			// Deleted by another: whoever keeps connections to it
			// closes them, as for a pod the fleet deletes.
			endpoint := r.endpoint
			events = append(events, func(ev fleet.Events) { ev.Stopping(endpoint) })
			rep.Endpoint = ""
		}
		r.endpoint = rep.Endpoint
		if n := restartsOf(p); n > r.restarts {
			events = append(events, b.failedLocked(r, p, n-r.restarts, now))
			r.restarts = n
		}
		switch ready := rep.State == fleet.Ready && p.DeletionTimestamp == nil; {
		case ready && !r.ready:
			r.ready, r.readyAt, r.stable = true, cmp.Or(rep.ReadyAt, now), false
			id := r.id
			events = append(events, func(ev fleet.Events) { ev.Ready(id) })
		case !ready:
			r.ready = false
		}
		if r.ready && !r.stable && now.Sub(r.readyAt) >= fleet.StableAfter {
			r.stable = true
			id := r.id
			events = append(events, func(ev fleet.Events) { ev.Stable(id) })
		}
	}
	return events
}

// restartsOf is how often the kubelet restarted p's containers.
func restartsOf(p *corev1.Pod) int {
	n := 0
	for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		n += int(cs.RestartCount)
	}
	return n
}

// failedLocked is the event telling the controller of n restarts of r's
// pod p by its kubelet, each a failure: a start that failed when it was
// not ready since, else a crash. Parked, r's pod goes and r ends Failed.
func (b *Backend) failedLocked(r *kreplica, p *corev1.Pod, n int, now time.Time) event {
	why := "its pod's container was restarted by the kubelet"
	for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		if cs.LastTerminationState.Terminated != nil && cs.RestartCount > 0 {
			why = crashReason(cs)
		}
	}
	r.lastError = why
	kind := fleet.FailedStart
	if r.ready {
		kind = fleet.CrashOf(now.Sub(r.readyAt))
	}
	r.ready = false
	id := r.id
	return func(ev fleet.Events) {
		for range n {
			if _, park := ev.Failed(id, kind, why); park {
				b.mu.Lock()
				if r := b.reps[id]; r != nil {
					r.parked, r.stopping = why, true
				}
				b.mu.Unlock()
				b.poke()
				return
			}
		}
	}
}

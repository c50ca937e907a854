package kubefleet

import (
	"cmp"
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"modelserve/internal/words"
)

// A Deployment scaled down by modelserve (a lower max, an idle model, a
// model given back for another, a parked one) loses the pods modelserve
// chooses, each once it has drained, never one the ReplicaSet controller
// picks with an answer in flight. When its replicas are to go down by k,
// the k pods to go are chosen: not ready first (they answer nothing),
// then those an operator stopped already, then idle ones, then the least
// busy. They leave Serving at once, so the gateway sends them nothing
// more, and the Deployment keeps one replica for each until it has
// drained. A drained pod is then deleted and the Deployment's replicas
// lowered, in the same pass. A Deployment scaled to 0 is lowered once all
// of its pods have drained, and its ReplicaSet deletes them all.
//
// Why in that order, with the real controller-manager: lowered first, the
// ReplicaSet controller would choose which pod goes by its own ranking,
// before it has seen ours deleted, and it could choose the one answering.
// The pod-deletion-cost annotation does not close that: it ranks only
// after a pod's phase and readiness, must reach the controller's cache
// before the lowered count does, and writing it needs pods patched, which
// modelserve's account (deploy/rbac.yaml) may not do. Deleted first, the
// controller may make a replacement for a moment, but a pod not yet
// placed, or pending, or not ready, ranks before every ready one (and a
// replacement is not ready for seconds: its weights to fetch, its engine
// to load, its probe's period), so the lowered count removes that
// replacement and nothing else. (Scaled to 0,
// there is no choice to get wrong, so no replacement is risked.)
//
// The choice is kept (drains) across passes: a pass neither undoes nor
// redoes a drain in progress, and a second scale-down while one drains
// chooses among the pods staying. A model wanting more again keeps the
// pods still draining instead of starting new ones.

// activePods are the pods of Deployment name the ReplicaSet controller
// counts: not being deleted, not ended.
func (f *Fleet) activePods(name string) []*corev1.Pod {
	pods, _ := f.pods.Pods(f.opts.Namespace).List(labels.SelectorFromSet(labels.Set{labelManagedBy: managedBy, labelDeployment: name}))
	return slices.DeleteFunc(pods, func(p *corev1.Pod) bool {
		return p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	})
}

// scaleDown settles Deployment name of model at target pods: it chooses
// the pods to go, deletes those drained, and says the replicas the
// Deployment is to be written with now: target, and one more for each pod
// still draining. why is why they go, as their detail says it.
func (f *Fleet) scaleDown(ctx context.Context, model, name string, target int32, why string) (int32, error) {
	pods := f.activePods(name)
	active := map[string]bool{}
	for _, p := range pods {
		active[p.Name] = true
	}
	f.mu.Lock()
	// A pod gone, or being deleted, is counted by the controller no more.
	f.forgetDrainsLocked(func(id string, d *draining) bool { return d.deployment == name && !active[id] })
	var staying, going []*corev1.Pod
	for _, p := range pods {
		if d := f.drains[p.Name]; d != nil && d.deployment == name {
			going = append(going, p)
		} else {
			staying = append(staying, p)
		}
	}
	switch {
	case len(staying) > int(target):
		for _, p := range f.rankToGoLocked(staying)[:len(staying)-int(target)] {
			f.goLocked(p, model, name, why)
		}
	case len(staying) < int(target):
		// Wanted again: the pods still draining stay, the busiest first.
		slices.SortFunc(going, func(a, b *corev1.Pod) int { return cmp.Compare(f.holds[b.Name], f.holds[a.Name]) })
		kept := 0
		for _, p := range going {
			if d := f.drains[p.Name]; kept < int(target)-len(staying) && !d.drained {
				stopTimer(d)
				delete(f.drains, p.Name)
				kept++
				f.log.Info("a draining pod is kept: its model wants it again", "replica", p.Name, "model", model)
			}
		}
	}
	var drained []*corev1.Pod
	all, held := true, int32(0)
	for _, p := range pods {
		if d := f.drains[p.Name]; d != nil && d.deployment == name && !d.deleted {
			held++
			if d.drained {
				drained = append(drained, p)
			} else {
				all = false
			}
		}
	}
	if target == 0 {
		// Every pod goes: once all have drained, the Deployment is
		// lowered to 0 and the controller deletes them all, which it
		// cannot get wrong, and makes no replacement for a moment.
		defer f.mu.Unlock()
		if all {
			return 0, nil
		}
		return held, nil
	}
	f.mu.Unlock()

	var failed error
	for _, p := range drained {
		err := f.opts.Client.CoreV1().Pods(f.opts.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			// Kept in the count: the Deployment is not lowered under it.
			failed = err
			continue
		}
		f.mu.Lock()
		if d := f.drains[p.Name]; d != nil {
			d.deleted = true
			f.log.Info("a pod its Deployment loses is deleted", "replica", p.Name, "model", model, "why", d.why)
		}
		f.mu.Unlock()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	replicas := target
	for _, d := range f.drains {
		if d.deployment == name && !d.deleted {
			replicas++
		}
	}
	return replicas, failed
}

// rankToGoLocked orders a Deployment's pods as they are chosen to go: not
// ready (or not placed) first, then those an operator stopped, then by the
// requests they hold, fewest first; the newest first among equals.
func (f *Fleet) rankToGoLocked(pods []*corev1.Pod) []*corev1.Pod {
	rank := func(p *corev1.Pod) int {
		switch {
		case !isReady(p):
			return 0
		case f.drains[p.Name] != nil:
			return 1
		}
		return 2
	}
	out := slices.Clone(pods)
	slices.SortStableFunc(out, func(a, b *corev1.Pod) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(f.holds[a.Name], f.holds[b.Name]),
			b.CreationTimestamp.Compare(a.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
	})
	return out
}

// goLocked marks p to leave Deployment name: drained at once when it
// holds no request, else once those it holds end. A pod an operator
// stopped already drains on, now for its Deployment; one whose deletion
// has begun is gone already, and is not replaced.
func (f *Fleet) goLocked(p *corev1.Pod, model, name, why string) {
	d := f.drains[p.Name]
	switch {
	case d == nil && f.holds[p.Name] == 0:
		d = &draining{why: why, model: model, drained: true}
	case d == nil:
		d = f.newDrainLocked(p.Name, model, why)
		f.log.Info("draining a pod its Deployment loses", "replica", p.Name, "model", model, "why", why, "in_flight", f.holds[p.Name])
	case d.ending:
		d.drained, d.deleted = true, true
	}
	d.deployment = name
	f.drains[p.Name] = d
}

// scaleWhy is why m's pods go when its Deployments are scaled down to want.
func (f *Fleet) scaleWhy(model string, want int, parked bool) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case parked:
		return "its model is parked"
	case f.givenWhy[model] != "":
		return f.givenWhy[model]
	}
	return "scaled down: its model wants " + words.Count(want, "replica", "replicas") + " now"
}

package kubefleet

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

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
	f.forgetDrainsLocked(func(id string, l *leaving) bool { return l.deployment == name && !active[id] })
	var staying, going []*corev1.Pod
	for _, p := range pods {
		if l := f.leaving[p.Name]; l != nil && l.deployment == name {
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
		slices.SortFunc(going, func(a, b *corev1.Pod) int { return cmp.Compare(f.drains.Holds(b.Name), f.drains.Holds(a.Name)) })
		kept := 0
		for _, p := range going {
			if kept < int(target)-len(staying) && f.drains.Keep(p.Name) {
				delete(f.leaving, p.Name)
				kept++
				f.log.Info("a draining pod is kept: its model wants it again", "replica", p.Name, "model", model)
			}
		}
	}
	var drained []*corev1.Pod
	all, held := true, int32(0)
	for _, p := range pods {
		if l := f.leaving[p.Name]; l != nil && l.deployment == name && !l.deleted {
			held++
			if f.drains.Ended(p.Name) {
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
		if l := f.leaving[p.Name]; l != nil {
			l.deleted = true
			_, detail, _ := f.drains.State(p.Name)
			f.log.Info("a pod its Deployment loses is deleted", "replica", p.Name, "model", model, "why", detail)
		}
		f.mu.Unlock()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	replicas := target
	for _, l := range f.leaving {
		if l.deployment == name && !l.deleted {
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
		case f.leaving[p.Name] != nil:
			return 1
		}
		return 2
	}
	out := slices.Clone(pods)
	slices.SortStableFunc(out, func(a, b *corev1.Pod) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(f.drains.Holds(a.Name), f.drains.Holds(b.Name)),
			b.CreationTimestamp.Compare(a.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
	})
	return out
}

// goLocked marks p to leave Deployment name: drained at once when it
// holds no request, else once those it holds end (fleet.Drains). A pod an
// operator stopped already drains on, now for its Deployment; one whose
// deletion has begun is gone already, and is not replaced.
func (f *Fleet) goLocked(p *corev1.Pod, model, name, why string) {
	l := f.leaving[p.Name]
	switch {
	case l == nil:
		l = &leaving{model: model}
		if n, _ := f.drains.Drain(p.Name, why); n > 0 {
			f.log.Info("draining a pod its Deployment loses", "replica", p.Name, "model", model, "why", why, "in_flight", n)
		}
	case l.ending:
		l.deleted = true
	}
	l.deployment = name
	f.leaving[p.Name] = l
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

// A Deployment whose pod template changes is rewritten only once its pods
// of the template before have drained: each leaves Serving at once, and
// takes no new request. The template changes with the model's catalog
// entry (another fingerprint, fleet.Fingerprint) and with what is not in
// it: the model's class (its PriorityClass), the engine image, the cards'
// product labels the nodes carry, the weights volume. The Deployment
// carries the hash of the template it was written with (templateHash);
// another hash means another template. Its rollout replaces every old
// pod at once (none of them serves any more), without waiting for room
// for a new pod first: as the local fleet stops a replica of the old entry
// before it starts one of the new. Written at once, the rolling update
// deleted each old pod as a new one became ready, with the answers it was
// streaming; and on a full node it waited for room that the old pods held.
//
// A Deployment written before it carried the hash is compared as the API
// server would write it (a dry run): the same template takes the hash in
// place, and its pods stay, as an upgrade of modelserve is not a change
// of what they run.

// Why a pod of a changed template goes: its entry changed, or only what
// modelserve makes of it.
const (
	rollWhy         = "its model's catalog entry changed: a pod of the new entry replaces it"
	rollTemplateWhy = "what its pods run changed (its model's class, the engine image, the nodes' cards or the weights volume): a pod of the new template replaces it"
)

// rolled is whether d, the Deployment as it is to be written now, may be
// written: the pods of it started from another template have drained
// (each still holding requests is made to drain).
func (f *Fleet) rolled(ctx context.Context, model string, d *appsv1.Deployment) (bool, error) {
	same := true
	cur, err := f.deployments.Deployments(f.opts.Namespace).Get(d.Name)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return false, err
	case cur.Annotations[annotationTemplate] == "":
		if same, err = f.sameTemplate(ctx, d); err != nil {
			return false, err
		}
	default:
		same = cur.Annotations[annotationTemplate] == d.Annotations[annotationTemplate]
	}
	fp := d.Spec.Template.Annotations[annotationFinger]
	ok := true
	for _, p := range f.activePods(d.Name) {
		why := rollTemplateWhy
		switch {
		case p.Annotations[annotationFinger] != fp:
			why = rollWhy
		case same:
			continue
		}
		if n, begun := f.drains.Drain(p.Name, why); begun && n > 0 {
			f.log.Info("draining a pod of a changed template", "replica", p.Name, "model", model, "why", why, "in_flight", n)
		}
		ok = ok && f.drains.Ended(p.Name)
	}
	return ok, nil
}

// sameTemplate is whether writing d leaves the pod template of the
// Deployment as it is now in the cluster: d is applied as a dry run, and
// the template the API server would keep, its defaults filled in, compared
// with the one it has.
func (f *Fleet) sameTemplate(ctx context.Context, d *appsv1.Deployment) (bool, error) {
	live, err := f.opts.Client.AppsV1().Deployments(f.opts.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading Deployment %s: %w", d.Name, err)
	}
	would, err := f.applyAs(ctx, d, true)
	if err != nil {
		return false, err
	}
	return apiequality.Semantic.DeepEqual(live.Spec.Template, would.(*appsv1.Deployment).Spec.Template), nil
}

// replaceAtOnce is the strategy of every Deployment the fleet writes: its
// rollout deletes its old pods first, all at once, then starts the new.
// Each rollout is of a template modelserve changed (an operator's edit of
// the template is undone by the next pass, drained), and comes once the
// old pods have drained (rolled).
func replaceAtOnce() appsv1.DeploymentStrategy {
	none, all := intstr.FromInt32(0), intstr.FromString("100%")
	return appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &none, MaxUnavailable: &all}}
}

package kubefleet

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"modelserve/internal/fleet"
	"modelserve/internal/operr"
)

// The operator's hands on the cluster's replicas, as the local fleet
// offers them (fleet.Fleet's Stop, Restart and Unpark), so the console and
// the API act the same over either fleet.

// controlTimeout bounds one control's calls to the API server.
const controlTimeout = 30 * time.Second

// Stop drains replica id's pod, then deletes it (drain.go). The catalog is not changed: its
// Deployment starts a new pod at once, placed by the scheduler, as the
// local fleet places a new replica of a model that still wants as many.
func (f *Fleet) Stop(id string) error {
	p, err := f.checkPod(id)
	if err != nil {
		return err
	}
	if err := f.drain(id, p.Annotations[annotationModel], "stopped by an operator"); err != nil {
		return err
	}
	f.log.Info("replica's pod stopped by an operator", "replica", id)
	return nil
}

// Restart starts replica id afresh. A pod's container cannot be restarted
// through the API, so its pod is deleted and its Deployment starts one
// with the same spec; with the weights kept on the node (--weights-volume)
// it does not fetch them again. It drains first, as Stop does: the
// answers it is writing end before it goes.
func (f *Fleet) Restart(id string) error {
	p, err := f.checkPod(id)
	if err != nil {
		return err
	}
	if err := f.drain(id, p.Annotations[annotationModel], "restarted by an operator"); err != nil {
		return err
	}
	f.log.Info("replica restarted by an operator, as a new pod once its requests end", "replica", id)
	return nil
}

func (f *Fleet) deletePod(id string) error {
	p, err := f.checkPod(id)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	// Only the pod that was looked at: one of the same name made since is
	// not this replica.
	err = f.opts.Client.CoreV1().Pods(f.opts.Namespace).Delete(ctx, id, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return operr.New(operr.NotFound, "replica %s has gone already: GET /api/v1/replicas lists those the fleet has", id)
	case err != nil:
		return operr.Wrap(operr.Unavailable, err, "the cluster did not delete replica %s's pod: %v", id, err)
	}
	f.Poke()
	return nil
}

// checkPod is replica id's pod, or why it cannot be acted on.
func (f *Fleet) checkPod(id string) (*corev1.Pod, error) {
	if !f.running() {
		return nil, operr.New(operr.Unavailable, "the fleet is not connected to the cluster yet, so replica %s cannot be acted on now; try again in a moment", operr.Quote(id))
	}
	p, err := f.pods.Pods(f.opts.Namespace).Get(id)
	if err != nil || p.Labels[labelManagedBy] != managedBy {
		return nil, operr.New(operr.NotFound, "the fleet has no replica named %s: it may have stopped since; GET /api/v1/replicas lists those it has", operr.Quote(id))
	}
	if p.DeletionTimestamp != nil {
		return nil, operr.New(operr.Conflict, "replica %s is stopping already; its Deployment starts a new pod if its model still wants it", id)
	}
	return p, nil
}

// Unpark lets the fleet run model again after its engine kept failing: the
// park on its owner object goes, the pods that failed are deleted, its
// Deployments are scaled back up, and what failed before does not count
// against it. Fix the cause
// first: a model unparked as it was fails as often again before it is
// parked again.
func (f *Fleet) Unpark(ctx context.Context, model string) error {
	if !f.running() {
		return operr.New(operr.Unavailable, "the fleet is not connected to the cluster yet, so %s cannot be unparked now; try again in a moment", operr.Quote(model))
	}
	f.mu.Lock()
	h, known := f.models[model]
	f.mu.Unlock()
	switch {
	case !known:
		return operr.New(operr.NotFound, "the fleet has no model named %s: GET /api/v1/catalog lists the catalog's models", operr.Quote(model))
	case !h.Parked:
		return operr.New(operr.Conflict, "%s is not parked: the fleet already runs it when the catalog wants it", model)
	}
	models, err := f.opts.Catalog.List(ctx)
	if err != nil {
		return err
	}
	for _, m := range models {
		if m.Name != model {
			continue
		}
		if _, err := weightsOf(m, f.opts.MirrorDir); err != nil {
			return operr.New(operr.Conflict, "%s stays parked: %v", model, err)
		}
		// Remembered here before the owner's annotation goes: the
		// informer's copy may show the park a moment longer, and the
		// pods it has now failed before the operator fixed the cause
		// (deleted below, they may show a moment longer too).
		failed := map[types.UID]bool{}
		for _, p := range f.modelPods(model) {
			failed[p.UID] = true
		}
		f.mu.Lock()
		f.parks[model] = park{fingerprint: fleet.Fingerprint(m), failed: failed}
		f.mu.Unlock()
		if _, err := f.apply(ctx, f.ownerMap(m, "", "")); err != nil {
			return operr.Wrap(operr.Unavailable, err, "the cluster did not take %s's unpark: %v", model, err)
		}
		// The pods that failed go too: a ReplicaSet scaled back up before
		// it had deleted them would keep them, failing as before.
		for _, p := range f.modelPods(model) {
			err := f.opts.Client.CoreV1().Pods(f.opts.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return operr.Wrap(operr.Unavailable, err, "the cluster did not delete %s's failed pod %s: %v", model, p.Name, err)
			}
		}
		f.log.Info("model unparked by an operator", "model", model)
		f.queue.Add(model)
		return nil
	}
	return operr.New(operr.NotFound, "the fleet has no model named %s: GET /api/v1/catalog lists the catalog's models", operr.Quote(model))
}

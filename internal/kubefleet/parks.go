package kubefleet

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"modelserve/internal/fleet"
)

// The controller's kept parks (fleet.ParkStore) are kept on each model's
// owner ConfigMap, by a field manager of their own: the owner written as
// a replica starts (by "modelserve") neither keeps nor drops them.
const (
	parksManager          = "modelserve-parks"
	annotationParkedKey   = "modelserve.io/parked-key"
	annotationParkedCount = "modelserve.io/parked-failures"
	annotationParkedAt    = "modelserve.io/parked-at"
)

// Parks are the controller's parks, kept in the cluster.
func (b *Backend) Parks() *fleet.Parks { return fleet.NewParksIn(parkStore{b.cluster}) }

type parkStore struct{ c *cluster }

// Load reads the parks from the owners, through the API: the caches are
// not read yet when the controller asks.
func (s parkStore) Load(ctx context.Context) (map[string]fleet.KeptPark, error) {
	list, err := s.c.opts.Client.CoreV1().ConfigMaps(s.c.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labelManagedBy + "=" + managedBy})
	if err != nil {
		return nil, err
	}
	out := map[string]fleet.KeptPark{}
	for _, cm := range list.Items {
		a := cm.Annotations
		if a[annotationModel] == "" {
			continue
		}
		if a[annotationParkedKey] == "" {
			// Parked by a modelserve before the controller kept the
			// parks: the owner named the entry by its fingerprint.
			if fp := a[annotationParkedFor]; fp != "" {
				out[a[annotationModel]] = fleet.KeptPark{Fingerprint: fp, Reason: a[annotationParkedWhy]}
			}
			continue
		}
		n, _ := strconv.Atoi(a[annotationParkedCount])
		at, _ := time.Parse(time.RFC3339Nano, a[annotationParkedAt])
		out[a[annotationModel]] = fleet.KeptPark{Key: a[annotationParkedKey], Reason: a[annotationParkedWhy], Failures: n, At: at}
	}
	return out, nil
}

// Keep writes model's park on its owner.
func (s parkStore) Keep(ctx context.Context, model string, pk fleet.KeptPark) error {
	return s.write(ctx, model, map[string]string{
		annotationModel: model, annotationParkedKey: pk.Key, annotationParkedWhy: pk.Reason,
		annotationParkedCount: strconv.Itoa(pk.Failures), annotationParkedAt: pk.At.UTC().Format(time.RFC3339Nano),
	})
}

// Forget drops the parks of models from their owners.
func (s parkStore) Forget(ctx context.Context, models ...string) error {
	for _, m := range models {
		_, err := s.c.opts.Client.CoreV1().ConfigMaps(s.c.opts.Namespace).Get(ctx, objName(m), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err := s.write(ctx, m, nil); err != nil {
			return err
		}
	}
	return nil
}

// write applies the park's annotations (none: the park goes) as the
// parks' field manager.
func (s parkStore) write(ctx context.Context, model string, ann map[string]string) error {
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: objName(model), Namespace: s.c.opts.Namespace, Labels: modelLabels(model), Annotations: ann},
	}
	body, err := json.Marshal(cm)
	if err != nil {
		return err
	}
	_, err = s.c.opts.Client.CoreV1().ConfigMaps(s.c.opts.Namespace).Patch(ctx, cm.Name, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: parksManager, Force: ptr(true)})
	return err
}

package kubefleet

import (
	"log/slog"
	"sync/atomic"

	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// cluster is what the fleet knows of the cluster and writes to it: its
// options, the informers' caches, and the objects a model's replicas are
// made of (objects.go). The cluster's backend (backend.go) works through
// it.
type cluster struct {
	opts Options
	log  *slog.Logger
	// priorities is whether the cluster has the PriorityClasses pods name
	// (priority.go); set before the caches are read.
	priorities bool

	// The listers are set before up, and read only while it is set.
	pods        corelisters.PodLister
	nodes       corelisters.NodeLister
	configMaps  corelisters.ConfigMapLister
	secrets     corelisters.SecretLister
	deployments appslisters.DeploymentLister
	// up is whether the caches have synced and are being kept.
	up atomic.Bool
}

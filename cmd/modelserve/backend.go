package main

import (
	"cmp"
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/kubefleet"
	"modelserve/internal/notify"
	"modelserve/internal/operr"
	"modelserve/internal/plan"
	"modelserve/jobs"
)

// fleetBackend is what the wiring uses of a fleet, whichever runs the
// replicas: the local one (engine processes on this machine) or the
// kubernetes one (Deployments in a cluster). Jobs, the gateway, the
// handlers, the metrics and the planner each declare the part they need;
// this is all of them together, so serve hands either to each.
type fleetBackend interface {
	Run(ctx context.Context) error
	Poke()
	Sync(ctx context.Context) error
	Replicas() []fleet.Replica
	ModelHealth() []fleet.ModelHealth
	Nodes() []fleet.NodeStatus
	NodeCPUs(memGB int) []int
	Pool() []plan.Node
	Serving(model string) []fleet.Replica
	EngineKey(id string) string
	Hold(id string) (release func(), ok bool)
	Use(model string, replicas int) (release func())
	Starts(ctx context.Context, limit int) ([]fleet.Start, error)
}

var (
	_ fleetBackend = (*fleet.Fleet)(nil)
	_ fleetBackend = (*kubefleet.Fleet)(nil)
)

// newBackend is the fleet cfg.Fleet names, with the catalog to hand to
// whatever changes it (it pokes the fleet) and the fleet as jobs watch it.
func newBackend(cfg config, enginePath string, store *catalog.Store, db *sql.DB, notifier *notify.Notifier, log *slog.Logger) (fleetBackend, *fleet.NotifyingCatalog, jobs.Fleet, error) {
	switch cfg.Fleet {
	case "", "local":
		f, cat, jf, err := newFleet(enginePath, store, db, notifier, log)
		if err != nil {
			return nil, nil, nil, err
		}
		return f, cat, jf, nil
	case "kubernetes":
		f, err := newKubeFleet(cfg, store, log)
		if err != nil {
			return nil, nil, nil, err
		}
		return f, fleet.NewNotifyingCatalog(store, f), jobsFleet{f}, nil
	}
	return nil, nil, nil, operr.New(operr.Invalid, "--fleet %q is not a fleet modelserve runs: use local (engine processes on this machine) or kubernetes", cfg.Fleet)
}

// newKubeFleet is the kubernetes fleet: its client from --kubeconfig
// (KUBECONFIG), else the pod's own service account.
func newKubeFleet(cfg config, store *catalog.Store, log *slog.Logger) (*kubefleet.Fleet, error) {
	var rc *rest.Config
	var err error
	if cfg.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
		if err != nil {
			return nil, operr.Wrap(operr.Invalid, err, "the kubeconfig %s cannot be used: %v", cfg.Kubeconfig, err)
		}
	} else if rc, err = rest.InClusterConfig(); err != nil {
		return nil, operr.Wrap(operr.Invalid, err, "--fleet kubernetes needs a cluster: pass --kubeconfig (or set KUBECONFIG), or run modelserve in a pod with its service account (deploy/)")
	}
	// client-go would hold the fleet to 5 requests a second, and serves
	// at once wait on each other's passes over every model at that rate.
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = kubefleet.ClientQPS, kubefleet.ClientBurst
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	mirrorURL := cfg.MirrorURL
	if mirrorURL == "" {
		mirrorURL = cfg.PublicURL
	}
	return kubefleet.New(kubefleet.Options{
		Client: client, Catalog: store, Namespace: cmp.Or(cfg.Namespace, "modelserve"),
		EngineImage: cfg.EngineImage, FetchImage: cfg.FetchImage, WeightsVolume: cfg.WeightsVolume,
		MirrorURL: mirrorURL, MirrorDir: filepath.Join(cfg.Data, "mirror"), MirrorToken: cfg.MirrorToken,
		GPUProductLabel: cfg.GPUProductLabel, Log: log.With("part", "fleet", "fleet", "kubernetes"),
	})
}

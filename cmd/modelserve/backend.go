package main

import (
	"cmp"
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/gguf"
	"modelserve/internal/kubefleet"
	"modelserve/internal/notify"
	"modelserve/internal/operr"
	"modelserve/internal/plan"
	"modelserve/internal/words"
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
	NodeCPUs(need int64) []int
	Pool() []plan.Node
	Serving(model string) []fleet.Replica
	EngineKey(id string) string
	Hold(id string, askedAt time.Time) (release func(), ok bool)
	Use(model string, replicas int, askedAt time.Time) (release func())
	Starts(ctx context.Context, limit int) ([]fleet.Start, error)
}

var (
	_ fleetBackend = (*fleet.Fleet)(nil)
	_ jobs.Fleet   = fleetBackend(nil)
)

// newBackend is the fleet cfg.Fleet names, with the catalog to hand to
// whatever changes it (it pokes the fleet).
func newBackend(ctx context.Context, cfg config, enginePath string, store *catalog.Store, db *sql.DB, notifier *notify.Notifier, log *slog.Logger) (fleetBackend, *fleet.NotifyingCatalog, error) {
	switch cfg.Fleet {
	case "", "local":
		if err := checkLocalMemory(ctx, cfg.LocalMemory, store); err != nil {
			return nil, nil, err
		}
		// Recorded even when they are to stop on exit: a kill leaves them
		// running, and the next modelserve adopts them, or stops them.
		engines := fleet.NewEngines(db, filepath.Join(cfg.Data, "engines"))
		f, cat, err := newFleet(enginePath, cfg.VLLM, cfg.LocalMemory, cfg.Headroom, cfg.DrainTimeout, residency(cfg.Residency), store, db, engines, cfg.StopEnginesOnExit, notifier, log)
		if err != nil {
			return nil, nil, err
		}
		return f, cat, nil
	case "kubernetes":
		f, err := newKubeFleet(cfg, store, notifier, log)
		if err != nil {
			return nil, nil, err
		}
		return f, fleet.NewNotifyingCatalog(store, f), nil
	}
	return nil, nil, operr.New(operr.Invalid, "--fleet %q is not a fleet modelserve runs: use local (engine processes on this machine) or kubernetes", cfg.Fleet)
}

// residency is --residency as the fleets take it: 0 there is their
// default, and none is negative.
func residency(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// checkLocalMemory refuses a --local-memory that could not hold even the
// smallest model: not the engine alone, nor any model of the catalog.
func checkLocalMemory(ctx context.Context, budget int64, store *catalog.Store) error {
	if budget == 0 {
		return nil
	}
	if budget < gguf.RAMFootprint {
		return operr.New(operr.Invalid, "--local-memory %s cannot hold any model: llama-server alone takes %s; give the fleet more", words.Size(budget), words.Size(gguf.RAMFootprint))
	}
	models, err := store.List(ctx)
	if err != nil {
		return err
	}
	var smallest catalog.Model
	least := int64(-1)
	for _, m := range models {
		for _, p := range m.Profiles {
			if p.RAMBytes > 0 && (least < 0 || p.RAMBytes < least) {
				smallest, least = m, p.RAMBytes
			}
		}
	}
	if least > budget {
		return operr.New(operr.Invalid, "--local-memory %s cannot hold even the smallest model of the catalog: %s needs %s; give the fleet more, or serve a smaller model", words.Size(budget), smallest.Name, words.Size(least))
	}
	return nil
}

// newKubeFleet is the fleet over the kubernetes backend: its client from
// --kubeconfig (KUBECONFIG), else the pod's own service account.
func newKubeFleet(cfg config, store *catalog.Store, notifier *notify.Notifier, log *slog.Logger) (*fleet.Fleet, error) {
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
	log = log.With("part", "fleet", "fleet", "kubernetes")
	kb, err := kubefleet.NewBackend(kubefleet.Options{
		Client: client, Catalog: store, Namespace: cmp.Or(cfg.Namespace, "modelserve"),
		EngineImage: cfg.EngineImage, VLLMImage: cfg.VLLMImage, FetchImage: cfg.FetchImage, WeightsVolume: cfg.WeightsVolume,
		MirrorURL: mirrorURL, MirrorDir: filepath.Join(cfg.Data, "mirror"), MirrorToken: cfg.MirrorToken,
		GPUProductLabel: cfg.GPUProductLabel, Log: log,
	})
	if err != nil {
		return nil, err
	}
	return fleet.New(fleet.Options{Catalog: store, Backend: kb.Attach, Parks: kb.Parks(), Notify: notifier,
		DrainTimeout: cfg.DrainTimeout, Residency: residency(cfg.Residency),
		// Kept free on each node, as on the local fleet's machine.
		Headroom: fleet.Headroom{RAM: cfg.Headroom, Card: cfg.Headroom}, Log: log})
}

package fleetsuite_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"modelserve/internal/fleet"
	"modelserve/internal/kubefleet"
	"modelserve/internal/kubetest"
	"modelserve/internal/llamatest"
	"modelserve/internal/mirror"
	"modelserve/internal/store"
)

// nodeRAM is each node's memory on both fleets, and headroom what each
// fleet keeps free of it: 7 GiB of it may be promised.
const (
	nodeRAM  = 8 << 30
	headroom = 1 << 30
)

// startLocal is the local fleet on two nodes of this machine, each
// pretending to have 2 cores and 8 GiB, running the real llama-server,
// keeping its parks in SQLite; restart stops it and starts another over
// the same database.
func startLocal(t *testing.T, w weights) (Fleet, func(*testing.T) Fleet) {
	engine := llamatest.Path(t)
	var nodes []fleet.Node
	for _, name := range []string{"node-1", "node-2"} {
		n, err := fleet.Local(fleet.LocalConfig{Name: name, CPUCores: 2, RAMBytes: nodeRAM, GPUs: []fleet.Card{}})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	db, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "modelserve.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	start := func(ct *testing.T) (Fleet, func()) {
		f, err := fleet.New(fleet.Options{Catalog: w.catalog, Engine: engine, Nodes: nodes, Log: fleetLog(t), Parks: fleet.NewParks(db),
			Threads: 1, Residency: -1, Interval: time.Second, StopGrace: 5 * time.Second, Headroom: fleet.Headroom{RAM: headroom}})
		if err != nil {
			ct.Fatal(err)
		}
		return f, run(t, "local", f.Run)
	}
	return restartable(start)(t)
}

// restartable is a fleet started by start, returned with restart: stop
// it, and start another in its place over the same state.
func restartable(start func(*testing.T) (Fleet, func())) func(*testing.T) (Fleet, func(*testing.T) Fleet) {
	return func(t *testing.T) (Fleet, func(*testing.T) Fleet) {
		f, stop := start(t)
		return f, func(ct *testing.T) Fleet {
			stop()
			f, stop = start(ct)
			return f
		}
	}
}

// The images the Kubernetes fleet's pods name, as the Kubelet runs them.
const (
	engineImage = "ghcr.io/ggml-org/llama.cpp:server"
	fetchImage  = "busybox:1.37"
	// mirrorToken is what the init containers fetch the weights with,
	// from the Secret the fleet writes; the mirror refuses any other.
	mirrorToken = "ms_suite-nodes"
)

// startKubernetes is the fleet over the Kubernetes backend, its parks
// kept in the cluster, on a real control plane with two kwok nodes of 4
// cores and 8 GiB, as deploy/rbac.yaml's account, with
// deploy/networkpolicy.yaml applied; the Kubelet runs every pod it writes:
// the init container in busybox fetches the weights from the mirror over
// HTTP with the mirror token, then the real llama-server serves them on
// the pod's address.
func startKubernetes(t *testing.T, w weights) (Fleet, func(*testing.T) Fleet) {
	engine := llamatest.Path(t)
	busybox := kubetest.Busybox(t)
	c := kubetest.StartRunning(t)
	for _, name := range []string{"node-1", "node-2"} {
		c.AddNode(t, kubetest.Node{Name: name, CPU: 4, Memory: "8Gi"})
	}
	client := c.Client(t, c.Account(t, "../../deploy/rbac.yaml"))
	c.Apply(t, "../../deploy/networkpolicy.yaml")
	c.Kubelet(t, map[string]kubetest.Image{fetchImage: {Path: busybox}, engineImage: {Entrypoint: engine}})

	m, err := mirror.New(mirror.Options{Dir: w.dir})
	if err != nil {
		t.Fatal(err)
	}
	files := m.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+mirrorToken {
			http.Error(rw, "the mirror needs an API token", http.StatusUnauthorized)
			return
		}
		files.ServeHTTP(rw, r)
	}))
	t.Cleanup(srv.Close)

	start := func(ct *testing.T) (Fleet, func()) {
		kb, err := kubefleet.NewBackend(kubefleet.Options{
			Client: client, Catalog: w.catalog, Namespace: "modelserve", EngineImage: engineImage, FetchImage: fetchImage,
			MirrorURL: srv.URL, MirrorDir: w.dir, MirrorToken: mirrorToken, Resync: 5 * time.Second, Log: fleetLog(t),
		})
		if err != nil {
			ct.Fatal(err)
		}
		f, err := fleet.New(fleet.Options{Catalog: w.catalog, Backend: kb.Attach, Parks: kb.Parks(), Log: fleetLog(t),
			Residency: -1, Interval: time.Second, Headroom: fleet.Headroom{RAM: headroom}})
		if err != nil {
			ct.Fatal(err)
		}
		stop := run(t, "kubernetes", f.Run)
		select {
		case <-kb.Synced():
		case <-time.After(time.Minute):
			ct.Fatal("the Kubernetes fleet did not read the cluster within a minute")
		}
		return f, stop
	}
	return restartable(start)(t)
}

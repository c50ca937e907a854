// Package fleet runs the catalog: for each model it keeps the replicas the
// catalog asks for running on the nodes, as llama.cpp's llama-server
// processes, and says how each fares.
//
// Without it a model in the catalog was only a row: someone had to pick a
// machine with room, start the engine with the right flags, watch it load,
// restart it when it died and notice when it never would. Here a loop
// compares the catalog with what runs and starts or stops engines until
// they agree; it places each replica where its memory fits (counting what
// other replicas were promised, not only what the kernel reports free),
// restarts a failing engine with backoff and parks a model whose engine
// keeps failing, with the engine's own words for why. A job, the console
// and the API read the result: Replicas, ModelHealth and Nodes.
package fleet

import (
	"context"
	"log/slog"
	"time"

	"k8s.io/utils/clock"

	"modelserve/catalog"
	"modelserve/internal/notify"
)

// Catalog is what the fleet runs: the catalog's models (catalog.Store, or
// a NotifyingCatalog around it).
type Catalog interface {
	List(ctx context.Context) ([]catalog.Model, error)
}

// Options configure a Fleet. Catalog is required.
type Options struct {
	Catalog Catalog
	// Engine is llama-server's path; empty looks for it on PATH, then for
	// the installed copy (engine.Find), each time a replica starts, so
	// installing it later needs no restart.
	Engine string
	// VLLM is the vllm program models of original weights run on
	// (vllm.go); empty looks for vllm on PATH at each start.
	VLLM string
	// Nodes run the replicas; none means this machine (Local).
	Nodes []Node
	// Backend, when set, is where the replicas run instead of as engine
	// processes on Nodes: it is made with the controller's Events, which
	// it tells of its replicas (a cluster's, internal/kubefleet).
	Backend func(Events) Backend
	Log     *slog.Logger
	// Notify is told of each model parked (--notify-url); nil tells no one.
	Notify *notify.Notifier
	// Interval is how often the catalog is compared with what runs when
	// nothing pokes the fleet: 5 s unless set.
	Interval time.Duration
	// Backoff is the wait before the first restart of a failed engine,
	// doubled for each failure after it, up to a minute: 2 s unless set.
	Backoff time.Duration
	// MaxFailures is how many failed starts in a row park a model: 3
	// unless set.
	MaxFailures int
	// StopGrace is how long a stopping engine has between SIGTERM and
	// SIGKILL: 5 s unless set.
	StopGrace time.Duration
	// DrainTimeout bounds how long a replica being retired (scaled down,
	// idle, replaced, stopped by an operator) waits for the requests
	// sent to it (Hold) to end before its engine is stopped anyway: the
	// longest an answer is let run. 10 minutes unless set.
	DrainTimeout time.Duration
	// Clock times demand and drains (Demands, Drains), the fleet's looks
	// at each Interval, and each replica's start, readiness and the minute
	// after which its model's failed starts are forgiven: the real clock
	// unless set; tests step a fake one.
	Clock clock.WithTickerAndDelayedExecution
	// HealthEvery is how often a ready replica's /health is asked whether
	// it still answers: 10 s unless set. An engine that misses
	// healthMisses checks in a row is stopped and started again: a hung
	// engine never exits by itself, and would stay "ready" for ever.
	HealthEvery time.Duration
	// LoadEvery is how often a ready replica's engine is asked for its
	// /slots and /metrics (Replica.Load): 2 s unless set.
	LoadEvery time.Duration
	// History keeps each engine start's estimated and measured memory;
	// nil keeps none.
	History *History
	// Parks keeps the models parked for failing to start, so a restart
	// does not start them again; nil keeps none.
	Parks *Parks
	// Engines records the local engines running, so that they outlive
	// the fleet's Run and the next modelserve on the same data folder
	// adopts them (engines.go); nil records none, and every engine ends
	// with Run.
	Engines *Engines
	// StopEnginesOnExit has the engines end with Run even when they are
	// recorded (--stop-engines-on-exit).
	StopEnginesOnExit bool
	// Threads, when set, is every replica's --threads, whatever its
	// profile says: tests on a small machine, where llama.cpp spins on
	// more threads than there are idle cores.
	Threads int
	// Headroom is kept free on every node, of its RAM and of each card,
	// for the system and other programs: nothing is promised from it.
	// None unless set (the command's --headroom sets it).
	Headroom Headroom
	// Residency is the least a replica that was used stays before it is
	// given back for another model on demand (swap.go): it stays
	// ResidencyLoads of its loads when that is more. DefaultResidency
	// unless set; negative keeps none, for tests of swapping itself.
	Residency time.Duration

	// beforePass, for tests, is called in each pass once it has the
	// catalog, before it takes the fleet's lock: a test holds the fleet's
	// next look back to act in the moment before it.
	beforePass func()
}

// State is where a replica is in its life.
type State string

const (
	// Starting: the engine is being started, or restarted after a
	// failure, and does not answer yet.
	Starting State = "starting"
	// Loading: the engine answers /health with 503 while it loads.
	Loading State = "loading"
	// Ready: /health answers 200; the replica serves.
	Ready State = "ready"
	// Draining: the replica is being retired: no new request is sent to
	// it, and its engine is stopped once those it has end.
	Draining State = "draining"
	// Stopping: the engine was asked to stop and has not exited yet.
	Stopping State = "stopping"
	// Failed: the engine kept failing and its model is parked.
	Failed State = "failed"
	// Stopped: the engine was stopped (replicas in this state are gone
	// from Replicas).
	Stopped State = "stopped"
)

// Replica is one running copy of a model, as the API shows it.
type Replica struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Profile string `json:"profile"`
	// Engine is what runs it: "llamacpp" or "vllm".
	Engine   string `json:"engine"`
	Node     string `json:"node"`
	Endpoint string `json:"endpoint,omitempty"`
	State    State  `json:"state"`
	// Detail says more about the state: why it is stopping, when it
	// restarts.
	Detail string `json:"detail,omitempty"`
	// Failures is how often its engine ended without being asked to;
	// LastError the last such ending, in the engine's words.
	Failures  int    `json:"failures"`
	LastError string `json:"last_error,omitempty"`
	// Started is when the current engine process started; ReadyAt when it
	// became ready.
	Started time.Time `json:"started,omitzero"`
	ReadyAt time.Time `json:"ready_at,omitzero"`
	PID     int       `json:"pid,omitempty"`
	// Threads is the engine's --threads (a pod's CPU request on
	// Kubernetes), not how many threads its process runs; 0 when left to
	// the engine.
	Threads int `json:"threads,omitempty"`
	// RSSBytes is the engine's resident memory once ready, beside
	// EstimateBytes, the check step's figure it was placed by: how good
	// the estimates are.
	RSSBytes      int64 `json:"rss_bytes,omitempty"`
	EstimateBytes int64 `json:"estimate_bytes"`
	// Load is what the engine last said of its work, once ready.
	Load *Load `json:"load,omitempty"`
	// Log is the engine's last lines (up to 200).
	Log []string `json:"log,omitempty"`
}

// ModelHealth is how the fleet fares with one model of the catalog.
type ModelHealth struct {
	Model string `json:"model"`
	Class string `json:"class"`
	// Want is the replicas the catalog asks for; Ready how many serve.
	Want  int `json:"want"`
	Ready int `json:"ready"`
	// Parked is a model no longer started, after Failures failed starts in
	// a row, or at once when nothing a restart does could help; Reason
	// says why.
	Parked   bool   `json:"parked"`
	Failures int    `json:"failures"`
	Reason   string `json:"reason,omitempty"`
	// Unplaceable is a model with fewer replicas than it wants, for want
	// of room; Placement says what holds it, node by node.
	Unplaceable bool   `json:"unplaceable"`
	Placement   string `json:"placement,omitempty"`
	// HardwareExists is whether some node could host it were it idle:
	// false means waiting will not help.
	HardwareExists bool `json:"hardware_exists"`
	// LastStop is the last of its replicas given back to make room for
	// another model, and why: "tiny-1: given back for chatty, idle for 4
	// min".
	LastStop string `json:"last_stop,omitempty"`
	// LastStopFor is the model that replica was given back for, and
	// LastStopAt when: the fleet page lists the last swaps by them.
	LastStopFor string    `json:"last_stop_for,omitempty"`
	LastStopAt  time.Time `json:"last_stop_at,omitzero"`
	// ResidencyEnds is, for a model waiting for room that replicas of
	// others hold for their residency (swap.go), when the first of those
	// residencies ends: when its requests may be answered, at the
	// soonest, which the gateway tells a client it turns away
	// (Retry-After).
	ResidencyEnds time.Time `json:"residency_ends,omitzero"`
}

// NodeStatus is one node, as the API shows it.
type NodeStatus struct {
	Name     string `json:"name"`
	CPUCores int    `json:"cpu_cores"`
	RAMBytes int64  `json:"ram_bytes"`
	// AvailableBytes is what the kernel reports a new process could have;
	// FreeBytes what a new replica can be promised, once the promises to
	// replicas still loading are counted; PromisedBytes is the sum of the
	// replicas' memory figures.
	AvailableBytes int64 `json:"available_bytes"`
	FreeBytes      int64 `json:"free_bytes"`
	PromisedBytes  int64 `json:"promised_bytes"`
	// HeadroomBytes is what is kept free of RAMBytes, and
	// CardHeadroomBytes of each card's memory: never promised.
	HeadroomBytes     int64       `json:"headroom_bytes"`
	CardHeadroomBytes int64       `json:"card_headroom_bytes,omitempty"`
	GPUs              []GPUStatus `json:"gpus,omitempty"`
	// Note is what the node could not count of its hardware, and why.
	Note     string   `json:"note,omitempty"`
	Replicas []string `json:"replicas"`
	// Reclaimable are the replicas that would be given back for a model
	// that needs their room (idle, on demand: swap.go), and
	// ReclaimableBytes the memory they hold.
	Reclaimable      []string `json:"reclaimable,omitempty"`
	ReclaimableBytes int64    `json:"reclaimable_bytes"`
}

// GPUStatus is one card of a node and the replica holding it.
type GPUStatus struct {
	Index       int    `json:"index"`
	Class       string `json:"class"`
	MemoryBytes int64  `json:"memory_bytes"`
	Replica     string `json:"replica,omitempty"`
}

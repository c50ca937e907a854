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
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
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
	Log   *slog.Logger
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
	// Clock times demand and drains (Demands, Drains): the real clock
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

// Fleet keeps the catalog's replicas running. Its methods are safe for
// concurrent use; Run is the loop that does the work.
type Fleet struct {
	opts   Options
	nodes  []Node
	log    *slog.Logger
	health *http.Client
	poke   chan struct{}
	// looks asks the loop to look again with the catalog as it last read
	// it (look).
	looks chan struct{}
	// listed is the catalog as the loop last read it, the loop's own.
	listed []catalog.Model
	// syncs carries the waits of Sync to the loop, which closes each after
	// its next pass.
	syncs chan chan struct{}

	mu      sync.Mutex
	running bool
	// quit is closed when a Run returns, so Sync stops waiting for it.
	quit     chan struct{}
	replicas map[string]*replica
	models   map[string]*modelState
	seq      map[string]int
	// demands are what the gateway asked of each model lately (Use).
	demands *Demands
	// drains count the requests each replica holds, and drain those
	// being retired (drain.go).
	drains *Drains
	// owed are the busy replicas the models waiting for room wait on, as
	// the last pass found them: they take no request asked after such a
	// model's (Hold, order.go).
	owed Owed
	// evictions count the replicas given back to make room (swap.go);
	// memWaits how long models waited for it (memwait.go).
	evictions map[[2]string]int
	memWaits  Waits
	// resides has the fleet look again when the first residency a model
	// waits for ends (wakeAt), rather than at its next tick.
	resides clock.Timer
	wakeAt  time.Time
	// restored are the parks Run read from Options.Parks that no model's
	// state has taken up yet; unpark the kept parks to forget.
	restored map[string]park
	unpark   []string
	// wg is the replicas' supervisors, which Run waits for.
	wg sync.WaitGroup
	// onReady are told the model of each replica that becomes ready.
	onReady Listeners[string]
	// onStopping are told the endpoint of each engine about to be
	// stopped (stopEngine).
	onStopping Listeners[string]
}

// OnReady has fn called with a replica's model each time a replica
// becomes ready, so a request waiting for it (the gateway's) goes at once
// rather than at its next look, and again a moment later, once its
// engine has said how many requests it serves at once (Replica.Load).
// fn must not block.
func (f *Fleet) OnReady(fn func(model string)) { f.onReady.Add(fn) }

// OnStopping has fn called with an engine's endpoint the moment before
// the engine is stopped, so that whoever keeps connections open to it
// (the gateway) closes them: the engine waits for them to close before it
// exits. fn must not block.
func (f *Fleet) OnStopping(fn func(endpoint string)) { f.onStopping.Add(fn) }

// New returns a fleet that runs opts.Catalog once Run is called.
func New(opts Options) (*Fleet, error) {
	if opts.Catalog == nil {
		return nil, errors.New("the fleet needs a catalog: set Options.Catalog")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Interval <= 0 {
		opts.Interval = 5 * time.Second
	}
	if opts.Backoff <= 0 {
		opts.Backoff = 2 * time.Second
	}
	if opts.MaxFailures <= 0 {
		opts.MaxFailures = 3
	}
	if opts.HealthEvery <= 0 {
		opts.HealthEvery = 10 * time.Second
	}
	if opts.StopGrace <= 0 {
		opts.StopGrace = 5 * time.Second
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = DefaultDrainTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.LoadEvery <= 0 {
		opts.LoadEvery = 2 * time.Second
	}
	if opts.Residency == 0 {
		opts.Residency = DefaultResidency
	}
	nodes := opts.Nodes
	if len(nodes) == 0 {
		n, err := Local(LocalConfig{Engine: opts.Engine})
		if err != nil {
			return nil, err
		}
		nodes = []Node{n}
	}
	names := map[string]bool{}
	for _, n := range nodes {
		if names[n.Name()] {
			return nil, errors.New("two nodes are named " + n.Name() + ": give each its own name")
		}
		names[n.Name()] = true
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // engines listen on loopback: never through a proxy
	f := &Fleet{
		opts: opts, nodes: nodes, log: opts.Log,
		health: &http.Client{Transport: tr, Timeout: 2 * time.Second},
		poke:   make(chan struct{}, 1), looks: make(chan struct{}, 1), syncs: make(chan chan struct{}),
		replicas: map[string]*replica{}, models: map[string]*modelState{}, seq: map[string]int{},
	}
	f.demands = NewDemands(opts.Clock, func(string) { f.look() })
	f.drains = NewDrains(opts.Clock, opts.DrainTimeout, f.drained)
	return f, nil
}

// Poke asks the fleet to compare the catalog with what runs now, rather
// than at its next tick. It never blocks.
func (f *Fleet) Poke() {
	select {
	case f.poke <- struct{}{}:
	default:
	}
}

// look asks the fleet to look again now at what runs, with the catalog as
// it last read it: a request came or ended, a replica was let go or its
// engine exited, a model may have fallen idle. None of that changes the
// catalog, and reading it was half of a pass's time, on the way from one
// model's last answer to the swap its room waits for. A change to the
// catalog is seen at once through Poke or Sync (NotifyingCatalog), and
// any other at the next tick. It never blocks.
func (f *Fleet) look() {
	select {
	case f.looks <- struct{}{}:
	default:
	}
}

// Run reconciles until ctx ends, then stops every replica and returns once
// their engines have exited. Nothing of a previous Run is kept: a second Run
// starts every replica afresh.
func (f *Fleet) Run(ctx context.Context) error {
	f.mu.Lock()
	if f.running {
		f.mu.Unlock()
		return errors.New("the fleet is already running")
	}
	f.running = true
	quit := make(chan struct{})
	f.quit = quit
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		close(quit)
		f.running = false
		f.demands.Keep(func(string) bool { return false })
		if f.resides != nil {
			f.resides.Stop()
			f.resides, f.wakeAt = nil, time.Time{}
		}
		f.replicas, f.models = map[string]*replica{}, map[string]*modelState{}
		f.restored, f.unpark = nil, nil
		f.mu.Unlock()
		f.listed = nil
		f.health.CloseIdleConnections()
	}()
	if _, err := f.enginePath(); err != nil {
		f.log.Warn("no engine: models are parked until there is one", "reason", sentenceOf(err))
	}
	// Parked before the restart, parked still: starting them would fail
	// as often again before they were parked again.
	restored, err := f.opts.Parks.load(ctx)
	if err != nil {
		f.log.Error("the parked models cannot be read: they are started again", "err", err)
	}
	f.mu.Lock()
	f.restored = restored
	f.mu.Unlock()

	tick := time.NewTicker(f.opts.Interval)
	defer tick.Stop()
	var synced chan struct{}
	reread := true
	for {
		f.reconcile(ctx, reread)
		if synced != nil {
			close(synced)
			synced = nil
		}
		reread = true
		select {
		case <-ctx.Done():
			f.stopAll("modelserve is stopping")
			f.wg.Wait()
			return nil
		case <-tick.C:
		case <-f.poke:
		case <-f.looks:
			reread = false
		case synced = <-f.syncs:
		}
	}
}

// Sync is Poke, waiting until the fleet has compared the catalog with what
// runs: what ModelHealth says afterwards is about the catalog as it is now.
// A model added again after it was parked would otherwise still show as
// parked to whoever looks first. It returns at once when the fleet is not
// running, and with ctx's error when ctx ends first.
func (f *Fleet) Sync(ctx context.Context) error {
	f.mu.Lock()
	running, quit := f.running, f.quit
	f.mu.Unlock()
	if !running {
		return nil
	}
	done := make(chan struct{})
	select {
	case f.syncs <- done:
	case <-quit:
		return nil
	case <-ctx.Done():
		f.Poke() // it looks at its next chance, if not now
		return ctx.Err()
	}
	select {
	case <-done:
	case <-quit:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// Replicas are the replicas running, starting or stopping, and those whose
// model is parked, by model and id.
func (f *Fleet) Replicas() []Replica {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Replica, 0, len(f.replicas))
	for _, r := range f.replicas {
		out = append(out, r.view())
	}
	slices.SortFunc(out, func(a, b Replica) int {
		return cmp.Or(strings.Compare(a.Model, b.Model), compareIDs(a.ID, b.ID))
	})
	return out
}

// ModelHealth is how each model of the catalog fares, by name, as of the
// last reconciling.
func (f *Fleet) ModelHealth() []ModelHealth {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]ModelHealth, 0, len(f.models))
	for name, st := range f.models {
		h := ModelHealth{
			Model: name, Class: st.class, Want: st.want,
			Parked: st.parked, Failures: st.failedStarts, Reason: st.reason,
			Unplaceable: st.unplaceable, Placement: st.placement, HardwareExists: st.hardware, LastStop: st.lastStop,
			ResidencyEnds: st.residencyEnds,
		}
		for _, r := range f.replicas {
			if r.model == name && r.state == Ready {
				h.Ready++
			}
		}
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b ModelHealth) int { return strings.Compare(a.Model, b.Model) })
	return out
}

// Starts are the newest limit engine starts that became ready, with their
// estimated and measured memory, newest first; none without a History.
func (f *Fleet) Starts(ctx context.Context, limit int) ([]Start, error) {
	return f.opts.History.Recent(ctx, limit)
}

// EngineKey is the key replica id's engine wants (--api-key); "" for a
// replica the fleet does not have.
func (f *Fleet) EngineKey(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.replicas[id]; ok {
		return r.key
	}
	return ""
}

// Nodes are the nodes with their memory now and the replicas on each.
func (f *Fleet) Nodes() []NodeStatus {
	rooms := f.rooms()
	out := make([]NodeStatus, len(rooms))
	for i, r := range rooms {
		out[i] = r.Status()
	}
	return out
}

// rooms are the nodes' room now (Room).
func (f *Fleet) rooms() []Room {
	caps := f.capacities()
	now := f.opts.Clock.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Room, len(f.nodes))
	for i, n := range f.nodes {
		out[i] = f.roomLocked(n, caps[i], now)
	}
	return out
}

// NodeCPUs are the CPU cores of each node with the memory for a replica of
// need bytes, busy or not: what catalog.SuggestCores sizes a profile's
// threads from.
func (f *Fleet) NodeCPUs(need int64) []int {
	var out []int
	for _, c := range f.capacities() {
		if c = f.opts.Headroom.keep(c); c.RAMBytes >= need {
			out = append(out, c.CPUCores)
		}
	}
	return out
}

// capacities reads every node, outside the lock: a node may take a moment
// to answer.
func (f *Fleet) capacities() []Capacity {
	out := make([]Capacity, len(f.nodes))
	for i, n := range f.nodes {
		out[i] = n.Capacity()
	}
	return out
}

package fleet

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"modelserve/catalog"
)

// Fleet keeps the catalog's replicas running. Its methods are safe for
// concurrent use; Run is the loop that does the work.
type Fleet struct {
	opts Options
	// backend starts, stops and watches the replicas (backend.go): the
	// engine processes of this machine's nodes, or Options.Backend's.
	backend Backend
	log     *slog.Logger
	poke    chan struct{}
	// looks asks the loop to look again with the catalog as it last read
	// it (look).
	looks chan struct{}
	// listed is the catalog as the loop last read it, and fps its
	// entries' fingerprints, the loop's own.
	listed []catalog.Model
	fps    fingerprints
	// nodes are the nodes as the loop last read them, at nodesAt; a look
	// reuses them while they hold (passNodes). settled is whether the
	// last pass left no engine starting, loading or stopping; ended that
	// an engine has exited since. The loop's own, but for ended.
	nodes   []NodeInfo
	nodesAt time.Time
	settled bool
	ended   atomic.Bool
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
	if len(nodes) == 0 && opts.Backend == nil {
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
	f := &Fleet{
		opts: opts, log: opts.Log,
		poke: make(chan struct{}, 1), looks: make(chan struct{}, 1), syncs: make(chan chan struct{}),
		replicas: map[string]*replica{}, models: map[string]*modelState{}, seq: map[string]int{},
		fps: fingerprints{},
	}
	if opts.Backend != nil {
		f.backend = opts.Backend(events{f})
	} else {
		f.backend = newProcesses(opts, nodes, events{f})
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

// EnginesOutlive is whether the engines keep running when Run ends, for
// the next modelserve to adopt (Backend.Outlives): an upgrade then ends
// Run before the new process starts, rather than load every model twice.
func (f *Fleet) EnginesOutlive() bool { return f.backend.Outlives() }

// Run reconciles until ctx ends. It starts by adopting the replicas a
// modelserve before it left running (Backend.Adopt). When ctx ends it
// stops every replica and returns once their engines have exited, unless
// the backend's engines outlive it (Backend.Outlives): then it stops only
// the replicas retiring, leaves the others running, and keeps its last
// view of them answering (Replicas, Serving), so a gateway still
// finishing requests, an upgrade handing over to a new process, can send
// them on. Nothing else of a previous Run is kept: a second Run starts
// every replica afresh, or adopts it again.
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
	if o, ok := f.backend.(Opener); ok {
		if err := o.Open(ctx); err != nil {
			f.mu.Lock()
			close(quit)
			f.running = false
			f.mu.Unlock()
			return err
		}
	}
	defer func() {
		f.mu.Lock()
		close(quit)
		f.running = false
		f.demands.Keep(func(string) bool { return false })
		if f.resides != nil {
			f.resides.Stop()
			f.resides, f.wakeAt = nil, time.Time{}
		}
		if !f.backend.Outlives() {
			f.replicas, f.models = map[string]*replica{}, map[string]*modelState{}
		}
		f.restored, f.unpark = nil, nil
		f.mu.Unlock()
		f.listed, f.fps, f.nodes = nil, fingerprints{}, nil
	}()
	if err := f.backend.Check(catalog.Model{}); err != nil {
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
	f.adoptLocked(ctx)
	f.mu.Unlock()

	tick := f.opts.Clock.NewTicker(f.opts.Interval)
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
			if !f.backend.Outlives() {
				f.stopAll("modelserve is stopping")
			}
			f.backend.Wait()
			return nil
		case <-tick.C():
		case <-f.poke:
		case <-f.looks:
			reread = false
		case synced = <-f.syncs:
		}
	}
}

// Opener is a backend that reaches where its replicas run at each Run's
// start (a cluster's reads it): an error ends the Run, saying why.
type Opener interface {
	Open(ctx context.Context) error
}

// Synced is closed once the fleet's backend knows its nodes the first
// time: at once for this machine's, once a cluster's has read it for a
// cluster's. Until then there are no nodes to place on, and every plan
// would fit nowhere.
func (f *Fleet) Synced() <-chan struct{} {
	if s, ok := f.backend.(interface{ Synced() <-chan struct{} }); ok {
		return s.Synced()
	}
	return closed
}

// closed is a channel closed from the start.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// adoptLocked takes back the replicas a modelserve before this one left
// running, as the backend finds them, in place of a Run before's view:
// the first pass counts their room as taken, and drains those whose
// catalog entry changed meanwhile. f.mu is held.
func (f *Fleet) adoptLocked(ctx context.Context) {
	f.replicas, f.models = map[string]*replica{}, map[string]*modelState{}
	for _, a := range f.backend.Adopt(ctx) {
		f.replicas[a.ID] = &replica{id: a.ID, model: a.Model, profile: a.Profile, fingerprint: a.Fingerprint,
			node: a.Node, memBytes: a.MemBytes, cards: a.Cards}
		// The replicas placed from now on are numbered after it.
		if n, ok := idNumber(a.ID); ok && strings.HasPrefix(a.ID, a.Model+"-") {
			f.seq[a.Model] = max(f.seq[a.Model], n)
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
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	// A backend that does what the pass asked of it after the pass (a
	// cluster's writes its objects then) is waited for too: what Sync
	// promises holds of what it runs.
	if sy, ok := f.backend.(Syncer); ok {
		return sy.Sync(ctx)
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
		out = append(out, f.viewLocked(r))
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
			Unplaceable: st.unplaceable, Placement: st.placement, HardwareExists: st.hardware,
			ResidencyEnds: st.residencyEnds,
		}
		st.lastStop.Tell(&h)
		for _, r := range f.replicas {
			if r.model == name && f.seenLocked(r).State == Ready {
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
		return f.seenLocked(r).Key
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
	nodes := f.backend.Nodes()
	now := f.opts.Clock.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Room, len(nodes))
	for i, n := range nodes {
		out[i] = f.roomLocked(n, now)
	}
	return out
}

// NodeCPUs are the CPU cores of each node with the memory for a replica of
// need bytes, busy or not: what catalog.SuggestCores sizes a profile's
// threads from.
func (f *Fleet) NodeCPUs(need int64) []int {
	var out []int
	for _, n := range f.backend.Nodes() {
		if c := f.opts.Headroom.keep(n.Capacity); c.RAMBytes >= need {
			out = append(out, c.CPUCores)
		}
	}
	return out
}

// replica is the controller's record of one replica, from its placement
// until its engine has exited for good. What its engine is doing is the
// backend's to say (seenLocked).
type replica struct {
	// Set at placement, then read-only.
	id, model, profile string
	fingerprint        string
	node               string
	memBytes           int64 // of RAM, promised on the node
	cards              []int // promised on the node

	// Guarded by Fleet.mu.
	// stopping is set once r is retired: it drains, then stops (the
	// fleet's Drains count the requests it holds), and state and detail
	// (Draining, Stopping) are then the controller's, not its engine's.
	stopping bool
	state    State
	detail   string
	// evictedFor is the model r is stopping to make room for: the room it
	// gives back is that model's.
	evictedFor string
	// released is a replica whose engine has exited for good: its memory
	// and cards are no longer promised. last is what it was then, and
	// lastLog its engine's last lines.
	released bool
	last     Observation
	lastLog  []string
}

// seenLocked is what r's engine is doing, as its backend says, with the
// controller's own word on a replica it retires.
func (f *Fleet) seenLocked(r *replica) Observation {
	if r.released {
		return r.last
	}
	o, ok := f.backend.Observe(r.id)
	if !ok {
		o.State = Stopped
	}
	if r.stopping {
		o.State, o.Detail = r.state, r.detail
	}
	return o
}

// nodeOfLocked is the node r runs on: where it was placed, or where its
// backend's scheduler bound it instead.
func (f *Fleet) nodeOfLocked(r *replica) string {
	return cmp.Or(f.seenLocked(r).Node, r.node)
}

// viewLocked is r as the API shows it.
func (f *Fleet) viewLocked(r *replica) Replica {
	o := f.seenLocked(r)
	log := r.lastLog
	if !r.released {
		log = f.backend.Log(r.id)
	}
	return Replica{
		ID: r.id, Model: r.model, Profile: r.profile, Node: cmp.Or(o.Node, r.node), Endpoint: o.Endpoint,
		State: o.State, Detail: o.Detail, Failures: o.Failures, LastError: o.LastError,
		Started: o.Started, ReadyAt: o.ReadyAt, PID: o.PID, Threads: o.Threads,
		RSSBytes: o.RSSBytes, EstimateBytes: r.memBytes, Load: o.Load, Log: log, Engine: o.Engine,
	}
}

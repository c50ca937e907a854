package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modelserve/catalog"
)

// processes is the local backend: each replica an engine process on one
// of the nodes (this machine, or a stand-in with less memory), started,
// watched and restarted after a failure by a supervisor of its own, with
// the controller told of each change that is its to weigh (Events).
type processes struct {
	opts   Options
	nodes  []Node
	log    *slog.Logger
	health *http.Client
	ev     Events

	mu    sync.Mutex
	procs map[string]*process
	// wg is the supervisors, which Wait waits for.
	wg sync.WaitGroup
}

func newProcesses(opts Options, nodes []Node, ev Events) *processes {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // engines listen on loopback: never through a proxy
	return &processes{opts: opts, nodes: nodes, log: opts.Log, ev: ev, procs: map[string]*process{},
		health: &http.Client{Transport: tr, Timeout: 2 * time.Second}}
}

// process is one replica's engine, from its start until it has exited for
// good.
type process struct {
	// Set at start, then read-only.
	id, model            string
	profile, fingerprint string
	node                 Node
	cards                []int
	threads              int
	memBytes             int64        // of RAM, promised on the node
	size                 catalog.Size // the engine's context, as its profile sizes it
	key                  string
	weights              string // the file the engine loads
	args, env            []string
	vllm                 bool // runs vLLM rather than llama-server
	startup              time.Duration
	log                  *logTail
	// cancel asks the supervisor to stop the engine; restart (buffered,
	// see Restart) to stop it and start it again.
	cancel  context.CancelFunc
	restart chan struct{}
	// stopAsked is set by Stop: the engine ends with the context then,
	// rather than outliving it (outlives).
	stopAsked atomic.Bool
	// adopted is the engine a modelserve before this one left running,
	// which the first run follows rather than starting one (Adopt);
	// the supervisor's own.
	adopted *engineRecord

	// obs is what the engine is doing, guarded by processes.mu.
	obs Observation
}

// Nodes are the nodes with their hardware now.
func (b *processes) Nodes() []NodeInfo {
	out := make([]NodeInfo, len(b.nodes))
	for i, n := range b.nodes {
		_, local := n.(*LocalNode)
		out[i] = NodeInfo{Name: n.Name(), Local: local, Capacity: n.Capacity()}
	}
	return out
}

// Check is why m cannot start on this machine: its engine missing, or its
// weights not in the mirror. The zero Model asks after llama-server alone.
func (b *processes) Check(m catalog.Model) error {
	_, llamaErr := b.enginePath()
	if m.Name == "" {
		return llamaErr
	}
	if err := b.modelEngineErr(m, llamaErr); err != nil {
		return err
	}
	_, _, err := weightsFiles(m)
	return err
}

// Start starts a replica's supervisor, which starts its engine.
func (b *processes) Start(ctx context.Context, pl Placement) error {
	m, p, cards := pl.Model, pl.Profile, pl.Cards
	weights, projector, err := weightsFiles(m)
	if err != nil {
		return err
	}
	node := b.nodeNamed(pl.Node)
	if node == nil {
		return fmt.Errorf("there is no node named %s", pl.Node)
	}
	threads := b.opts.Threads
	if threads <= 0 {
		threads = p.CPUCores
	}
	if threads <= 0 {
		// Half the smallest node it fits on, as the job does when it sizes
		// a profile: the same replica gets the same threads wherever it
		// lands.
		threads = catalog.SuggestCores(pl.Cores)
	}
	env, dropped := catalog.EngineEnv(p)
	if len(dropped) > 0 {
		b.log.Warn("engine settings left out: they are not ones a profile may set", "model", m.Name, "profile", p.Name, "settings", dropped)
	}
	if p.GPUClass != "" {
		idx := make([]string, len(cards))
		for i, c := range cards {
			idx[i] = strconv.Itoa(c)
		}
		// The cards by nvidia-smi's numbers, for either backend the engine
		// may run them on (devices.go): CUDA numbers them so in PCI order
		// (its default puts the fastest first); Vulkan in its driver's
		// order, the same on a node of one class of card.
		list := strings.Join(idx, ",")
		env = append(env, "CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES="+list, "GGML_VK_VISIBLE_DEVICES="+list)
	}
	key := newKey()
	env = append(env, keyEnvOf(p)+"="+key)
	rctx, cancel := context.WithCancel(ctx)
	pr := &process{
		id: pl.ID, model: m.Name, node: node, profile: p.Name, fingerprint: pl.Fingerprint, cards: cards, threads: threads,
		memBytes: p.HostBytes(), size: p.Size, key: key, weights: weights,
		args:    argsOf(m, p, weights, projector, threads),
		vllm:    runsOnVLLM(p),
		env:     env,
		startup: StartupTimeout(p, weightsBytes(m, weights)),
		log:     newLogTail(), cancel: cancel, restart: make(chan struct{}, 1),
		obs: Observation{State: Starting, Key: key, Threads: threads, Engine: engineName(runsOnVLLM(p))},
	}
	b.mu.Lock()
	b.procs[pr.id] = pr
	b.mu.Unlock()
	b.wg.Add(1)
	go b.supervise(rctx, pr)
	return nil
}

// Stop stops replica id's engine; its supervisor ends it.
func (b *processes) Stop(id, _ string) {
	if pr := b.proc(id); pr != nil {
		pr.stopAsked.Store(true)
		pr.cancel()
	}
}

// Restart stops replica id's engine and starts it again in the same
// place; a replica waiting to restart after a failure is started at once.
func (b *processes) Restart(id, why string) {
	pr := b.proc(id)
	if pr == nil {
		return
	}
	// Not ready from now: the gateway stops sending it requests before
	// its engine goes.
	b.mu.Lock()
	pr.obs.State, pr.obs.Detail = Starting, why
	b.mu.Unlock()
	pr.log.Note("modelserve: " + why)
	// One restart asked is enough however often the button is pressed.
	select {
	case pr.restart <- struct{}{}:
	default:
	}
}

// Observe is what replica id's engine is doing.
func (b *processes) Observe(id string) (Observation, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	pr, ok := b.procs[id]
	if !ok {
		return Observation{}, false
	}
	return pr.obs, true
}

// Log is replica id's engine's last lines.
func (b *processes) Log(id string) []string {
	if pr := b.proc(id); pr != nil {
		return pr.log.Lines()
	}
	return nil
}

// Note adds a line of modelserve's to replica id's log.
func (b *processes) Note(id, line string) {
	if pr := b.proc(id); pr != nil {
		pr.log.Note(line)
	}
}

// Wait returns once every supervisor has ended.
func (b *processes) Wait() {
	b.wg.Wait()
	b.health.CloseIdleConnections()
}

func (b *processes) proc(id string) *process {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.procs[id]
}

// outcome is how one run of an engine ended: asked to stop, stopped to
// start again, or one of the failures the controller counts (Failure).
type outcome int

const (
	stopped      outcome = -1 // asked to stop
	restarted    outcome = -2 // stopped to start again, as an operator asked
	left         outcome = -3 // left running past the fleet's Run (outlives)
	failedStart          = outcome(FailedStart)
	crashedEarly         = outcome(CrashedEarly)
	crashedLate          = outcome(CrashedLate)
	noEngine             = outcome(NoEngine)
	badEngine            = outcome(BadEngine)
)

// failure is the failure o is, for the controller.
func (o outcome) failure() Failure { return Failure(o) }

// Health is polled fast while an engine loads, so a replica whose engine
// does not write that it listens (listening.go) is seen ready within a
// poll of its engine being ready (a request waiting for a cold start waits
// for that poll: at 50 ms it was most of modelserve's own part of a cold
// start), and then slower for an engine that takes minutes.
const (
	fastPoll    = 10 * time.Millisecond
	fastFor     = 10 * time.Second
	slowPoll    = 500 * time.Millisecond
	rssInterval = 5 * time.Second
	// settleAfterReady is how long after a replica is ready its memory is
	// first read and its start kept in the history (see attempt).
	settleAfterReady = 50 * time.Millisecond
	// historyWrite bounds the write of a start to the history.
	historyWrite = 5 * time.Second
	// healthMisses is how many health checks in a row a ready engine may
	// miss (no answer, or not 200) before it is restarted. One miss is a
	// busy moment; three at Options.HealthEvery apart is not.
	healthMisses = 3
)

// supervise runs r's engine until r is stopped, restarting it after a
// failure with backoff, until its model is parked.
func (b *processes) supervise(ctx context.Context, r *process) {
	defer b.wg.Done()
	for {
		out, why := b.attempt(ctx, r)
		if out == left {
			return // still in procs: the fleet's last view of it stays
		}
		if out == stopped || ctx.Err() != nil || b.ev.Retiring(r.id) {
			b.end(r, Stopped, "")
			return
		}
		if out == restarted {
			b.restarting(r)
			continue // not a failure: no backoff, nothing counted
		}
		wait, park := b.failed(r, out, why)
		if park {
			b.end(r, Failed, why)
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			b.end(r, Stopped, "")
			return
		case <-t.C:
		case <-r.restart:
			t.Stop()
		}
	}
}

// attempt starts r's engine once and follows it until it ends or r is
// stopped.
func (b *processes) attempt(ctx context.Context, r *process) (out outcome, why string) {
	if a := r.adopted; a != nil {
		r.adopted = nil
		return b.followAdopted(ctx, r, a)
	}
	engine, err := b.engineFor(r)
	if err != nil {
		return noEngine, sentenceOf(err)
	}
	tail := newLogTail() // this run's lines alone, for the reason it ends
	up := newListening()
	output := io.MultiWriter(r.log, tail, up)
	spec := Spec{Engine: engine, Args: r.args, Env: r.env, Output: output}
	if b.opts.Engines != nil {
		if spec.LogFile, err = b.opts.Engines.logPath(r.id); err != nil {
			return failedStart, "the engine could not be started: " + err.Error()
		}
	}
	r.log.Note("modelserve: starting " + filepath.Base(engine) + " " + strings.Join(r.args, " "))
	proc, err := r.node.Start(ctx, spec)
	if errors.Is(err, ErrEngineMissing) {
		return badEngine, fmt.Sprintf("llama-server at %s could not be run (%v): install llama.cpp's llama-server there, "+
			"or point --llama-server (MODELSERVE_LLAMA_SERVER) at it", engine, errors.Unwrap(err))
	}
	if err != nil {
		return failedStart, "the engine could not be started: " + err.Error()
	}
	started := b.opts.Clock.Now()
	// flush reads the last of the engine's file, its reason for ending,
	// before the tail is read for it.
	flush := func() {}
	if spec.LogFile != "" {
		fl, err := followLog(spec.LogFile, 0, output)
		if err != nil {
			b.stopEngine(proc)
			return failedStart, "the engine's log cannot be read: " + err.Error()
		}
		flush = fl.stop
		defer flush()
		b.recordEngine(ctx, r, proc, started)
		defer func() {
			if out != left {
				b.forgetEngine(ctx, r.id)
			}
		}()
	}
	b.mu.Lock()
	o := &r.obs
	o.PID, o.Endpoint, o.Started, o.ReadyAt, o.RSSBytes, o.Load = proc.PID(), proc.Endpoint(), started, time.Time{}, 0, nil
	o.State, o.Detail = Starting, ""
	b.mu.Unlock()

	deadline := time.NewTimer(r.startup)
	defer deadline.Stop()
	poll := time.NewTimer(fastPoll)
	defer poll.Stop()
	heard := up.heard
	for ready := false; !ready; {
		select {
		case <-ctx.Done():
			if b.leaves(r) {
				return left, ""
			}
			b.stopEngine(proc)
			return stopped, ""
		case <-r.restart:
			b.stopEngine(proc)
			return restarted, ""
		case <-proc.Done():
			flush()
			return failedStart, failureReason(proc.Err(), tail.Lines())
		case <-deadline.C:
			b.stopEngine(proc)
			flush()
			why := fmt.Sprintf("not ready within %s, its startup deadline", r.startup)
			if last := meaningful(tail.Lines()); last != "" {
				why += "; its last words: " + last
			}
			return failedStart, why
		case <-heard:
			if !r.vllm {
				// llama-server writes the line once its model is loaded
				// and its slots take requests, when its /health says 200:
				// ready now. Asking /health first cost every cold start a
				// connection and a round trip (a millisecond on a busy
				// machine) to learn what the line had said.
				ready = true
				continue
			}
			heard = nil // asked at once; the polls go on should it not answer yet
		case <-poll.C:
		}
		switch b.probe(ctx, proc.Endpoint()) {
		case http.StatusOK:
			ready = true
		case http.StatusServiceUnavailable:
			b.setState(r, Loading)
		}
		if b.opts.Clock.Since(started) < fastFor {
			poll.Reset(fastPoll)
		} else {
			poll.Reset(slowPoll)
		}
	}

	// Ready the moment the engine says so, and the requests waiting for
	// it told, with the slots its profile gave it when it gave them: the
	// engine is asked for its load only after the settle below. Read at
	// once, its /slots and /metrics went to the engine beside the first
	// request, and the engine answered them first.
	readyAt := b.opts.Clock.Now()
	told := r.toldLoad(readyAt)
	b.mu.Lock()
	r.obs.ReadyAt, r.obs.State, r.obs.Load = readyAt, Ready, told
	b.mu.Unlock()
	b.ev.Ready(r.id)
	var load Load // the engine's own word, once read
	if told == nil {
		// An unsized profile's engine chose its slots itself: until it
		// says, the gateway sends it one request at a time.
		load = b.readLoadOnce(ctx, r, proc)
	}
	// Its memory, its load and the history's row wait a moment, for the
	// requests that waited for this start to reach the engine first: the
	// walk of /proc (2.3 ms of CPU among 90 processes) and the database
	// write, run beside them on two cores, held the first request from
	// the engine 3.5 ms after ready rather than 1.6 ms.
	settle := time.NewTimer(settleAfterReady)
	select {
	case <-settle.C:
	case <-ctx.Done():
	case <-proc.Done():
	}
	settle.Stop()
	if told != nil && ctx.Err() == nil {
		load = b.readLoadOnce(ctx, r, proc)
	}
	var rss int64 // 0: not measured
	// Asked once: stopped later (while the start is kept, below), the
	// engine is stopped by the loop after, as at any other moment.
	stoppedEarly := ctx.Err() != nil
	leaving := stoppedEarly && b.leaves(r)
	if stoppedEarly && !leaving {
		// Stopped within the settle (given back for another model the
		// moment after its request): the engine goes first, and its
		// room with it, then the start is kept, its memory unmeasured.
		// Kept first, the history's write held every such swap's room,
		// and the walk of /proc held it 2–5 ms more.
		b.stopEngine(proc)
	} else {
		rss = proc.RSS()
	}
	b.mu.Lock()
	r.obs.RSSBytes = rss
	b.mu.Unlock()
	b.log.Info("replica ready", "replica", r.id, "node", r.node.Name(), "endpoint", proc.Endpoint(),
		"took", readyAt.Sub(started).Round(time.Millisecond), "rss_bytes", rss, "estimate_bytes", r.memBytes)
	size := r.size
	if load.Size.Slots > 0 {
		size.Slots = load.Size.Slots // the engine's own word, when it says
	}
	// A start that happened is kept even when the replica is stopped in
	// the moment before (given back for another model within the settle):
	// the history counts engine starts, and a swap's are the ones asked
	// about.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), historyWrite)
	row, err := b.opts.History.record(rctx, Start{
		Replica: r.id, Model: r.model, File: r.weights, Size: size,
		EstimateBytes: r.memBytes, RSSBytes: rss, Started: started, ReadyAt: readyAt,
	})
	cancel()
	if err != nil {
		b.log.Warn("the replica's start is not kept in the history", "replica", r.id, "err", err)
	}
	if spec.LogFile != "" && (!stoppedEarly || leaving) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engineWrite)
		if err := b.opts.Engines.ready(rctx, r.id, readyAt); err != nil {
			b.log.Warn("the engine is not recorded as ready: the next modelserve will not adopt it", "replica", r.id, "err", err)
		}
		cancel()
	}
	if leaving {
		return left, ""
	}
	if stoppedEarly {
		return stopped, "" // its engine stopped within the settle, above
	}
	return b.serving(ctx, r, proc, tail, flush, readyAt, row)
}

// serving follows r's ready engine until it ends, r is stopped or
// restarted, or the fleet's Run ends and leaves it running. flush reads
// the last of the engine's output into tail; row is its start's in the
// history (0 for none).
func (b *processes) serving(ctx context.Context, r *process, proc Process, tail *logTail, flush func(), readyAt time.Time, row int64) (outcome, string) {
	stable := b.opts.Clock.NewTimer(StableAfter)
	defer stable.Stop()
	measure := time.NewTicker(rssInterval)
	defer measure.Stop()
	check := time.NewTicker(b.opts.HealthEvery)
	defer check.Stop()
	loadTick := time.NewTicker(b.opts.LoadEvery)
	defer loadTick.Stop()
	missed := 0
	for {
		select {
		case <-ctx.Done():
			if b.leaves(r) {
				return left, ""
			}
			b.stopEngine(proc)
			return stopped, ""
		case <-r.restart:
			b.stopEngine(proc)
			return restarted, ""
		case <-proc.Done():
			flush()
			why := failureReason(proc.Err(), tail.Lines()) +
				fmt.Sprintf(" (after %s ready)", b.opts.Clock.Since(readyAt).Round(time.Second))
			return outcome(CrashOf(b.opts.Clock.Since(readyAt))), why
		case <-stable.C():
			b.ev.Stable(r.id)
		case <-check.C:
			if b.probe(ctx, proc.Endpoint()) == http.StatusOK {
				missed = 0
				continue
			}
			if missed++; missed < healthMisses {
				continue
			}
			b.stopEngine(proc)
			why := fmt.Sprintf("it stopped answering /health (%d checks %s apart) after %s ready, and was stopped to start again",
				healthMisses, b.opts.HealthEvery, b.opts.Clock.Since(readyAt).Round(time.Second))
			return outcome(CrashOf(b.opts.Clock.Since(readyAt))), why
		case <-measure.C:
			// The figure that placement counts as used, and the estimate's
			// measure, as the engine grows its caches.
			rss := proc.RSS()
			b.mu.Lock()
			r.obs.RSSBytes = rss
			b.mu.Unlock()
			if err := b.opts.History.measured(ctx, row, rss); err != nil && ctx.Err() == nil {
				b.log.Warn("the replica's measured memory is not kept in the history", "replica", r.id, "err", err)
			}
		case <-loadTick.C:
			// A busy engine may be slow to answer; the figures stay as
			// they were until it does.
			if l, err := b.loadOf(ctx, r, proc.Endpoint()); err == nil {
				b.mu.Lock()
				r.obs.Load = &l
				b.mu.Unlock()
			}
		}
	}
}

// toldLoad is the load of r's engine as its profile told it to serve,
// idle as an engine just ready is, as of at: its slots (--parallel,
// vLLM's --max-num-seqs) and each slot's share of the pool. Nil for an
// unsized profile, whose engine chose its slots itself.
func (r *process) toldLoad(at time.Time) *Load {
	if !r.size.Sized() {
		return nil
	}
	return &Load{Size: catalog.Size{Pool: r.size.Pool, Slots: max(r.size.Slots, 1)}, At: at}
}

// readLoadOnce reads the load of r's engine, keeps it on r and tells
// OnReady's listeners, who may now send it as many requests as it serves
// at once. It is the zero Load when the engine does not answer.
func (b *processes) readLoadOnce(ctx context.Context, r *process, proc Process) Load {
	l, err := b.loadOf(ctx, r, proc.Endpoint())
	if err != nil {
		b.log.Warn("the engine's load cannot be read", "replica", r.id, "err", err)
		return Load{}
	}
	b.mu.Lock()
	r.obs.Load = &l
	b.mu.Unlock()
	b.ev.Ready(r.id)
	return l
}

// stopEngine stops an engine, OnStopping's listeners told first, so
// that they close the connections they keep open to it: llama-server's
// HTTP server waits, for each connection open when it stops, a tenth of a
// second for the client to close its end, and a kept connection nobody
// reads is closed by nobody. That wait was half of every swap.
func (b *processes) stopEngine(proc Process) {
	b.ev.Stopping(proc.Endpoint())
	proc.Stop(b.opts.StopGrace)
}

// probe is the status /health answers with; 0 for no answer.
func (b *processes) probe(ctx context.Context, endpoint string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/health", nil)
	if err != nil {
		return 0
	}
	resp, err := b.health.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	return resp.StatusCode
}

func (b *processes) setState(r *process, s State) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r.obs.State = s
}

// failed counts a failure of r's engine, asks the controller how long to
// wait before starting it again, or whether its model is parked, and says
// so in r's detail and log.
func (b *processes) failed(r *process, out outcome, why string) (wait time.Duration, park bool) {
	b.mu.Lock()
	o := &r.obs
	o.Failures++
	o.LastError = why
	o.PID, o.Endpoint, o.RSSBytes, o.ReadyAt, o.Load = 0, "", 0, time.Time{}, nil
	b.mu.Unlock()
	b.log.Warn("replica failed", "replica", r.id, "node", r.node.Name(), "reason", why)
	wait, park = b.ev.Failed(r.id, out.failure(), why)
	if park {
		return 0, true
	}
	b.mu.Lock()
	r.obs.State, r.obs.Detail = Starting, fmt.Sprintf("restarting in %s after: %s", wait, why)
	b.mu.Unlock()
	r.log.Note(fmt.Sprintf("modelserve: %s; restarting in %s", why, wait))
	return wait, false
}

// end records that r's engine has exited for good and tells the
// controller, which gives back what r was promised.
func (b *processes) end(r *process, s State, why string) {
	b.mu.Lock()
	o := &r.obs
	o.State, o.PID, o.Endpoint, o.RSSBytes, o.Load = s, 0, "", 0, nil
	if why != "" {
		o.Detail = why
	}
	last := *o
	b.mu.Unlock()
	r.cancel()
	b.ev.Ended(r.id, last, r.log.Lines())
	b.mu.Lock()
	delete(b.procs, r.id)
	b.mu.Unlock()
}

// restarting clears what the engine stopped for a restart had: its
// process, address and figures are no more.
func (b *processes) restarting(r *process) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o := &r.obs
	o.PID, o.Endpoint, o.RSSBytes, o.ReadyAt, o.Load = 0, "", 0, time.Time{}, nil
	o.State = Starting
}

package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"modelserve/catalog"
)

// Adopted is a replica a backend found running at Run's start and took
// back: the controller keeps it as it would one it placed.
type Adopted struct {
	ID, Model, Profile string
	// Fingerprint is the catalog entry's it was started from: an entry
	// changed since replaces it through the normal drain.
	Fingerprint string
	Node        string
	MemBytes    int64
	Cards       []int
}

// Outlives is whether the engines still running when the fleet's Run
// ends are left running for the next modelserve to adopt: they are
// recorded (Options.Engines), and the operator did not ask for them to
// stop (Options.StopEnginesOnExit).
func (b *processes) Outlives() bool {
	return b.opts.Engines != nil && !b.opts.StopEnginesOnExit
}

// leaves is whether r's engine is left running now that its context has
// ended: the fleet's Run ended, and r was neither stopped nor retiring
// (a replica draining or stopping anyway is stopped as it would be).
func (b *processes) leaves(r *process) bool {
	return b.Outlives() && !r.stopAsked.Load() && !b.ev.Retiring(r.id)
}

// recordEngine records r's engine, just started, for the next modelserve.
func (b *processes) recordEngine(ctx context.Context, r *process, proc Process, started time.Time) {
	id, ok := identify(proc.PID())
	if !ok {
		return // gone already: its end is seen at once
	}
	rec := engineRecord{
		Replica: r.id, Model: r.model, Profile: r.profile, Fingerprint: r.fingerprint, Node: r.node.Name(),
		Engine: engineName(r.vllm), id: id, PID: proc.PID(), Endpoint: proc.Endpoint(), Key: r.key,
		MemBytes: r.memBytes, Cards: r.cards, Threads: r.threads, Pool: r.size.Pool, Slots: r.size.Slots,
		Weights: r.weights, Args: r.args, Env: r.env, Startup: r.startup, Started: started,
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engineWrite)
	defer cancel()
	if err := b.opts.Engines.keep(wctx, rec); err != nil {
		b.log.Warn("the engine is not recorded: the next modelserve will not adopt it", "replica", r.id, "err", err)
	}
}

// forgetEngine deletes replica id's record: its engine has ended.
func (b *processes) forgetEngine(ctx context.Context, id string) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engineWrite)
	defer cancel()
	if err := b.opts.Engines.forget(wctx, id); err != nil {
		b.log.Warn("the ended engine's record is kept: the next modelserve drops it", "replica", id, "err", err)
	}
}

// Adopt takes back the engines the records say a modelserve before this
// one left running on this data folder: each one whose process is still
// the one recorded (its pid, start time, binary and user: a pid alone may
// be another's by now) and which answers /health and /slots with its
// replica's key. It starts a supervisor for each, which follows it as it
// would an engine it started, and returns them. A record whose process is
// gone, or is another, is dropped and nothing is signalled; an engine of
// ours failing its checks is stopped, never trusted.
func (b *processes) Adopt(ctx context.Context) []Adopted {
	b.mu.Lock()
	b.procs = map[string]*process{} // a Run before's, left running: taken from the records again
	b.mu.Unlock()
	if b.opts.Engines == nil {
		return nil
	}
	recs, err := b.opts.Engines.list(ctx)
	if err != nil {
		b.log.Error("the running engines cannot be read: none is adopted", "err", err)
		return nil
	}
	type check struct {
		pr   *process
		load Load
		why  string // not adopted, and why
		bad  bool   // ours, but failing its checks: stopped
	}
	checks := make([]check, len(recs))
	var wg sync.WaitGroup
	for i, rec := range recs {
		c := &checks[i]
		node := b.nodeNamed(rec.Node)
		switch {
		case node == nil:
			c.why = "its node " + rec.Node + " is not one of this fleet's"
		case rec.id.uid != os.Getuid():
			c.why = "it was started by another user"
		case !rec.id.is(rec.PID):
			c.why = fmt.Sprintf("its process (pid %d) has exited, or the pid is another process's now", rec.PID)
		default:
			c.pr = b.adoptee(rec, node)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := b.awaitLoaded(ctx, rec); err != nil {
					c.why, c.bad = "it does not answer /health: "+err.Error(), true
					return
				}
				l, err := b.loadOf(ctx, c.pr, rec.Endpoint)
				if err != nil {
					c.why, c.bad = "it does not answer /slots with its key: "+err.Error(), true
				}
				c.load = l
			}()
		}
	}
	wg.Wait()
	var out []Adopted
	stopped := 0
	for i, rec := range recs {
		c := checks[i]
		if c.why != "" {
			b.log.Info("not adopting an engine left running", "replica", rec.Replica, "pid", rec.PID, "reason", c.why)
			if c.bad {
				stopped++
				b.wg.Add(1)
				go func() {
					defer b.wg.Done()
					stopByIdentity(rec.PID, rec.id, b.opts.StopGrace)
					b.forgetEngine(ctx, rec.Replica)
				}()
			} else {
				b.forgetEngine(ctx, rec.Replica)
			}
			continue
		}
		pr := c.pr
		pr.obs.Load = &c.load
		pr.obs.RSSBytes = groupRSS(rec.PID)
		rctx, cancel := context.WithCancel(ctx)
		pr.cancel = cancel
		b.mu.Lock()
		b.procs[pr.id] = pr
		b.mu.Unlock()
		b.wg.Add(1)
		go b.supervise(rctx, pr)
		b.log.Info("adopted an engine left running", "replica", rec.Replica, "pid", rec.PID, "endpoint", rec.Endpoint)
		out = append(out, Adopted{ID: rec.Replica, Model: rec.Model, Profile: rec.Profile, Fingerprint: rec.Fingerprint,
			Node: rec.Node, MemBytes: rec.MemBytes, Cards: rec.Cards})
	}
	if stopped > 0 {
		b.log.Warn("engines left running failed their checks and are stopped", "count", stopped)
	}
	return out
}

// awaitLoaded waits while rec's engine answers /health that it is still
// loading (503), as one left mid-load by a handover does, until it is
// ready or its startup deadline has passed: stopped for failing /health,
// it would only load again from the start. Any other answer, or none, is
// said at once.
func (b *processes) awaitLoaded(ctx context.Context, rec engineRecord) error {
	// Real time: the deadline is the engine's own loading, counted from
	// when it started, and never more than its whole startup deadline.
	left := min(time.Until(rec.Started.Add(rec.Startup)), rec.Startup)
	deadline := time.Now().Add(left)
	for {
		_, err := b.engineGet(ctx, rec.Endpoint+"/health", rec.Key)
		var st *engineStatus
		if err == nil || !errors.As(err, &st) || st.code != http.StatusServiceUnavailable {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w, still loading past its startup deadline of %s", err, rec.Startup)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(loadingPoll):
		}
	}
}

// loadingPoll is how often an engine still loading is asked whether it
// is ready, when adopted mid-load.
const loadingPoll = 250 * time.Millisecond

// adoptee is the replica of rec's engine, ready, as Start would have
// made it.
func (b *processes) adoptee(rec engineRecord, node Node) *process {
	readyAt := rec.ReadyAt
	if readyAt.IsZero() {
		readyAt = b.opts.Clock.Now() // it finished loading meanwhile
	}
	vllm := rec.Engine == EngineVLLM
	return &process{
		id: rec.Replica, model: rec.Model, profile: rec.Profile, fingerprint: rec.Fingerprint, node: node,
		cards: rec.Cards, threads: rec.Threads, memBytes: rec.MemBytes, key: rec.Key, weights: rec.Weights,
		size: catalog.Size{Pool: rec.Pool, Slots: rec.Slots}, args: rec.Args, env: rec.Env, vllm: vllm, startup: rec.Startup,
		log: newLogTail(), restart: make(chan struct{}, 1), adopted: &rec,
		obs: Observation{State: Ready, Key: rec.Key, Threads: rec.Threads, Engine: engineName(vllm), PID: rec.PID,
			Endpoint: rec.Endpoint, Started: rec.Started, ReadyAt: readyAt},
	}
}

// followAdopted follows r's adopted engine as serving follows one it
// started, its output read from its file.
func (b *processes) followAdopted(ctx context.Context, r *process, rec *engineRecord) (out outcome, why string) {
	proc := adopt(ctx, rec.PID, rec.id, rec.Endpoint)
	tail := newLogTail()
	flush := func() {}
	if path, err := b.opts.Engines.logPath(r.id); err == nil {
		if fl, err := followLog(path, -logBacklog, io.MultiWriter(r.log, tail)); err == nil {
			flush = fl.stop
			defer flush()
		}
	}
	defer func() {
		if out != left {
			b.forgetEngine(ctx, r.id)
		}
	}()
	r.log.Note(fmt.Sprintf("modelserve: adopted this engine (pid %d), left running by the modelserve before", rec.PID))
	b.ev.Ready(r.id)
	b.mu.Lock()
	readyAt := r.obs.ReadyAt
	b.mu.Unlock()
	return b.serving(ctx, r, proc, tail, flush, readyAt, 0)
}

// nodeNamed is the fleet's node named name; nil when there is none.
func (b *processes) nodeNamed(name string) Node {
	for _, n := range b.nodes {
		if n.Name() == name {
			return n
		}
	}
	return nil
}

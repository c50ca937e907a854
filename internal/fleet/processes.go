package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"modelserve/catalog"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"modelserve/internal/words"
)

// replica is one copy of a model, from its placement until its engine has
// exited for good.
type replica struct {
	// Set at placement, then read-only.
	id, model, profile string
	fingerprint        string
	node               Node
	memBytes           int64        // of RAM, promised on the node
	cards              []int        // promised on the node
	size               catalog.Size // the engine's context, as its profile sizes it
	key                string
	weights            string // the file the engine loads
	threads            int
	args, env          []string
	vllm               bool // runs vLLM rather than llama-server
	startup            time.Duration
	log                *logTail
	// cancel asks the supervisor to stop the engine; restart (buffered,
	// see Fleet.Restart) to stop it and start it again.
	cancel  context.CancelFunc
	restart chan struct{}

	// Guarded by Fleet.mu.
	state    State
	detail   string
	failures int
	lastErr  string
	started  time.Time
	readyAt  time.Time
	pid      int
	endpoint string
	rss      int64
	load     *Load
	// stopping is set once r is retired: it drains, then stops (the
	// fleet's Drains count the requests it holds).
	stopping bool
	// evictedFor is the critical model r is stopping to make room for:
	// the room it gives back is that model's.
	evictedFor string
	// released is a replica whose engine has exited for good: its memory
	// and cards are no longer promised.
	released bool
}

func (r *replica) view() Replica {
	return Replica{
		ID: r.id, Model: r.model, Profile: r.profile, Node: r.node.Name(), Endpoint: r.endpoint,
		State: r.state, Detail: r.detail, Failures: r.failures, LastError: r.lastErr,
		Started: r.started, ReadyAt: r.readyAt, PID: r.pid, Threads: r.threads,
		RSSBytes: r.rss, EstimateBytes: r.memBytes, Load: r.load, Log: r.log.Lines(), Engine: engineName(r.vllm),
	}
}

// outcome is how one run of an engine ended.
type outcome int

const (
	stopped      outcome = iota // asked to stop
	failedStart                 // ended, or was killed at its deadline, before it was ready
	crashedEarly                // ended soon after it was ready: as good as a failed start
	crashedLate                 // ended after serving a while: restarted, not held against it
	noEngine                    // no engine installed: parked until there is one
	badEngine                   // an engine that cannot be run: no restart can help
	restarted                   // stopped to start again, as an operator asked
)

// stableAfter is how long a replica serves before its model's failed
// starts are forgiven: an engine that loads and dies at its first request
// is failing to start as surely as one that never loads.
const stableAfter = time.Minute

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
func (f *Fleet) supervise(ctx context.Context, r *replica) {
	defer f.wg.Done()
	for {
		out, why := f.attempt(ctx, r)
		if out == stopped || ctx.Err() != nil || f.retiring(r) {
			f.end(r, Stopped, "")
			return
		}
		if out == restarted {
			f.restarting(r)
			continue // not a failure: no backoff, nothing counted
		}
		wait, park := f.failed(r, out, why)
		if park {
			f.keepPark(r)
			f.end(r, Failed, why)
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			f.end(r, Stopped, "")
			return
		case <-t.C:
		case <-r.restart:
			t.Stop()
		}
	}
}

// retiring is whether r is being retired: an engine that ends while it
// drains is not started again.
func (f *Fleet) retiring(r *replica) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return r.stopping
}

// attempt starts r's engine once and follows it until it ends or r is
// stopped.
func (f *Fleet) attempt(ctx context.Context, r *replica) (outcome, string) {
	engine, err := f.engineFor(r)
	if err != nil {
		return noEngine, sentenceOf(err)
	}
	tail := newLogTail() // this run's lines alone, for the reason it ends
	up := newListening()
	r.log.Note("modelserve: starting " + filepath.Base(engine) + " " + strings.Join(r.args, " "))
	proc, err := r.node.Start(ctx, Spec{Engine: engine, Args: r.args, Env: r.env, Output: io.MultiWriter(r.log, tail, up)})
	if errors.Is(err, ErrEngineMissing) {
		return badEngine, fmt.Sprintf("llama-server at %s could not be run (%v): install llama.cpp's llama-server there, "+
			"or point --llama-server (MODELSERVE_LLAMA_SERVER) at it", engine, errors.Unwrap(err))
	}
	if err != nil {
		return failedStart, "the engine could not be started: " + err.Error()
	}
	f.mu.Lock()
	r.pid, r.endpoint, r.started, r.readyAt, r.rss, r.load = proc.PID(), proc.Endpoint(), time.Now(), time.Time{}, 0, nil
	if !r.stopping {
		r.state, r.detail = Starting, ""
	}
	f.mu.Unlock()

	deadline := time.NewTimer(r.startup)
	defer deadline.Stop()
	poll := time.NewTimer(fastPoll)
	defer poll.Stop()
	heard := up.heard
	for ready := false; !ready; {
		select {
		case <-ctx.Done():
			f.stopEngine(proc)
			return stopped, ""
		case <-r.restart:
			f.stopEngine(proc)
			return restarted, ""
		case <-proc.Done():
			return failedStart, failureReason(proc.Err(), tail.Lines())
		case <-deadline.C:
			f.stopEngine(proc)
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
		switch f.probe(ctx, proc.Endpoint()) {
		case http.StatusOK:
			ready = true
		case http.StatusServiceUnavailable:
			f.setState(r, Loading)
		}
		if time.Since(r.started) < fastFor {
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
	readyAt := time.Now()
	told := r.toldLoad(readyAt)
	f.mu.Lock()
	r.readyAt = readyAt
	if !r.stopping {
		r.state = Ready
	}
	r.load = told
	f.mu.Unlock()
	f.onReady.Tell(r.model)
	var load Load // the engine's own word, once read
	if told == nil {
		// An unsized profile's engine chose its slots itself: until it
		// says, the gateway sends it one request at a time.
		load = f.readLoadOnce(ctx, r, proc)
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
		load = f.readLoadOnce(ctx, r, proc)
	}
	var rss int64 // 0: not measured
	// Asked once: stopped later (while the start is kept, below), the
	// engine is stopped by the loop after, as at any other moment.
	stoppedEarly := ctx.Err() != nil
	if stoppedEarly {
		// Stopped within the settle (given back for another model the
		// moment after its request): the engine goes first, and its
		// room with it, then the start is kept, its memory unmeasured.
		// Kept first, the history's write held every such swap's room,
		// and the walk of /proc held it 2–5 ms more.
		f.stopEngine(proc)
	} else {
		rss = proc.RSS()
	}
	f.mu.Lock()
	r.rss = rss
	f.mu.Unlock()
	f.log.Info("replica ready", "replica", r.id, "node", r.node.Name(), "endpoint", r.endpoint,
		"took", readyAt.Sub(r.started).Round(time.Millisecond), "rss_bytes", rss, "estimate_bytes", r.memBytes)
	size := r.size
	if load.Size.Slots > 0 {
		size.Slots = load.Size.Slots // the engine's own word, when it says
	}
	// A start that happened is kept even when the replica is stopped in
	// the moment before (given back for another model within the settle):
	// the history counts engine starts, and a swap's are the ones asked
	// about.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), historyWrite)
	row, err := f.opts.History.record(rctx, Start{
		Replica: r.id, Model: r.model, File: r.weights, Size: size,
		EstimateBytes: r.memBytes, RSSBytes: rss, Started: r.started, ReadyAt: readyAt,
	})
	cancel()
	if err != nil {
		f.log.Warn("the replica's start is not kept in the history", "replica", r.id, "err", err)
	}
	if stoppedEarly {
		return stopped, "" // its engine stopped within the settle, above
	}

	stable := time.NewTimer(stableAfter)
	defer stable.Stop()
	measure := time.NewTicker(rssInterval)
	defer measure.Stop()
	check := time.NewTicker(f.opts.HealthEvery)
	defer check.Stop()
	loadTick := time.NewTicker(f.opts.LoadEvery)
	defer loadTick.Stop()
	missed := 0
	for {
		select {
		case <-ctx.Done():
			f.stopEngine(proc)
			return stopped, ""
		case <-r.restart:
			f.stopEngine(proc)
			return restarted, ""
		case <-proc.Done():
			why := failureReason(proc.Err(), tail.Lines()) +
				fmt.Sprintf(" (after %s ready)", time.Since(readyAt).Round(time.Second))
			if time.Since(readyAt) < stableAfter {
				return crashedEarly, why
			}
			return crashedLate, why
		case <-stable.C:
			f.mu.Lock()
			if st := f.models[r.model]; st != nil && !st.parked {
				st.failedStarts = 0
			}
			f.mu.Unlock()
		case <-check.C:
			if f.probe(ctx, proc.Endpoint()) == http.StatusOK {
				missed = 0
				continue
			}
			if missed++; missed < healthMisses {
				continue
			}
			f.stopEngine(proc)
			why := fmt.Sprintf("it stopped answering /health (%d checks %s apart) after %s ready, and was stopped to start again",
				healthMisses, f.opts.HealthEvery, time.Since(readyAt).Round(time.Second))
			if time.Since(readyAt) < stableAfter {
				return crashedEarly, why
			}
			return crashedLate, why
		case <-measure.C:
			// The figure that placement counts as used, and the estimate's
			// measure, as the engine grows its caches.
			rss := proc.RSS()
			f.mu.Lock()
			r.rss = rss
			f.mu.Unlock()
			if err := f.opts.History.measured(ctx, row, rss); err != nil && ctx.Err() == nil {
				f.log.Warn("the replica's measured memory is not kept in the history", "replica", r.id, "err", err)
			}
		case <-loadTick.C:
			// A busy engine may be slow to answer; the figures stay as
			// they were until it does.
			if l, err := f.loadOf(ctx, r, proc.Endpoint()); err == nil {
				f.mu.Lock()
				r.load = &l
				f.mu.Unlock()
			}
		}
	}
}

// toldLoad is the load of r's engine as its profile told it to serve,
// idle as an engine just ready is, as of at: its slots (--parallel,
// vLLM's --max-num-seqs) and each slot's share of the pool. Nil for an
// unsized profile, whose engine chose its slots itself.
func (r *replica) toldLoad(at time.Time) *Load {
	if !r.size.Sized() {
		return nil
	}
	return &Load{Size: catalog.Size{Pool: r.size.Pool, Slots: max(r.size.Slots, 1)}, At: at}
}

// readLoadOnce reads the load of r's engine, keeps it on r and tells
// OnReady's listeners, who may now send it as many requests as it serves
// at once. It is the zero Load when the engine does not answer.
func (f *Fleet) readLoadOnce(ctx context.Context, r *replica, proc Process) Load {
	l, err := f.loadOf(ctx, r, proc.Endpoint())
	if err != nil {
		f.log.Warn("the engine's load cannot be read", "replica", r.id, "err", err)
		return Load{}
	}
	f.mu.Lock()
	r.load = &l
	f.mu.Unlock()
	f.onReady.Tell(r.model)
	return l
}

// stopEngine stops an engine, OnStopping's listeners told first, so
// that they close the connections they keep open to it: llama-server's
// HTTP server waits, for each connection open when it stops, a tenth of a
// second for the client to close its end, and a kept connection nobody
// reads is closed by nobody. That wait was half of every swap.
func (f *Fleet) stopEngine(proc Process) {
	f.onStopping.Tell(proc.Endpoint())
	proc.Stop(f.opts.StopGrace)
}

// probe is the status /health answers with; 0 for no answer.
func (f *Fleet) probe(ctx context.Context, endpoint string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/health", nil)
	if err != nil {
		return 0
	}
	resp, err := f.health.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	return resp.StatusCode
}

func (f *Fleet) setState(r *replica, s State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !r.stopping {
		r.state = s
	}
}

// failed counts a failure of r's engine and says how long to wait before
// starting it again, or that its model is parked.
func (f *Fleet) failed(r *replica, out outcome, why string) (wait time.Duration, park bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r.failures++
	r.lastErr = why
	r.pid, r.endpoint, r.rss, r.readyAt, r.load = 0, "", 0, time.Time{}, nil
	f.log.Warn("replica failed", "replica", r.id, "node", r.node.Name(), "reason", why)
	st := f.models[r.model]
	if st == nil {
		// Its model left the catalog: the reconciling stops it.
		return f.opts.Backoff, false
	}
	switch out {
	case noEngine, badEngine:
		st.failedStarts++
		st.parked, st.reason, st.engineMissing = true, why, out == noEngine
	case failedStart, crashedEarly:
		st.failedStarts++
		if st.failedStarts >= f.opts.MaxFailures {
			st.parked, st.reason, st.lasting = true, why, true
		}
	}
	if st.parked {
		f.log.Error("model parked", "model", r.model, "failures", st.failedStarts, "reason", st.reason)
		r.log.Note(fmt.Sprintf("modelserve: %s; %s is parked after %d failed %s in a row", why, r.model,
			st.failedStarts, words.Plural(st.failedStarts, "start", "starts")))
		return 0, true
	}
	wait = f.opts.Backoff << min(max(st.failedStarts-1, 0), 6)
	wait = min(wait, max(time.Minute, f.opts.Backoff))
	r.state, r.detail = Starting, fmt.Sprintf("restarting in %s after: %s", wait, why)
	r.log.Note(fmt.Sprintf("modelserve: %s; restarting in %s", why, wait))
	return wait, false
}

// end records that r's engine has exited for good, gives back what it was
// promised, and has the fleet look again: it may now place another there.
func (f *Fleet) end(r *replica, s State, why string) {
	f.mu.Lock()
	r.released = true
	r.state, r.pid, r.endpoint, r.rss, r.load = s, 0, "", 0, nil
	if why != "" {
		r.detail = why
	}
	if s == Stopped && f.replicas[r.id] == r {
		delete(f.replicas, r.id)
		f.drains.Gone(r.id)
	}
	f.mu.Unlock()
	r.cancel()
	f.look()
}

// Package gateway answers OpenAI-compatible requests (/v1/chat/completions,
// /v1/completions, /v1/embeddings, /v1/models and any other /v1/ route whose
// body names a model) on modelserve's own address, by sending each to a
// ready replica of the model it names.
//
// Before it, a served model could not be called: each replica's engine
// listens on a port of its own behind a key only modelserve knows, so a
// client had no address to use and no key that worked. Here a client sends
// the OpenAI request it already sends elsewhere, with a modelserve API
// token, naming a catalog model or alias; the gateway checks the token,
// picks the least busy replica (the same one for requests that share a long
// prompt prefix, so the engine's prompt cache is reused), starts a replica
// for a model loaded on demand and waits for it, queues what the replicas
// cannot take yet and refuses beyond a bound, and relays the answer as the
// engine writes it. The engine's key is added on the way and never shown.
//
// A model's canary (a new version run beside it while it is judged) takes
// its share of the requests naming the model, counted exactly, unseen by
// the clients: they cannot name nor list it, and its answers name the
// model. Measure counts each version's requests for the judge.
package gateway

import (
	"context"
	"errors"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"modelserve/catalog"
	"modelserve/internal/auth"
	"modelserve/internal/fleet"
)

// Catalog is where model names and aliases are looked up (catalog.Store).
type Catalog interface {
	List(ctx context.Context) ([]catalog.Model, error)
}

// Fleet is what the gateway needs of the replicas (fleet.Fleet).
type Fleet interface {
	// Serving are a model's ready replicas, with their engines' load.
	Serving(model string) []fleet.Replica
	// Hold says a request asked at askedAt (its arrival, as told to Use)
	// is being sent to replica id, which is not retired until release; ok
	// is false for a replica no longer to send to (draining, gone), or
	// not this request's yet (kept for a model asked for before it, which
	// waits for its room), which the gateway then leaves alone a while.
	Hold(id string, askedAt time.Time) (release func(), ok bool)
	// EngineKey is the key a replica's engine wants.
	EngineKey(id string) string
	// ModelHealth says which models are parked or unplaceable, and why.
	ModelHealth() []fleet.ModelHealth
	// Use says a model is in use by a request asked at askedAt, and how
	// many replicas it needs, until release: models loaded on demand
	// start, and stop when idle. The model's place among those waiting
	// for room is its oldest request's askedAt.
	Use(model string, replicas int, askedAt time.Time) (release func())
}

// Tokens checks the API tokens clients send (auth.Tokens).
type Tokens interface {
	Check(ctx context.Context, tok string) (auth.Token, error)
}

// Options configure a Gateway. Catalog, Fleet and Tokens are required.
type Options struct {
	Catalog Catalog
	Fleet   Fleet
	Tokens  Tokens
	// Metrics is where the gateway's figures are registered; nil keeps
	// none.
	Metrics prometheus.Registerer
	Log     *slog.Logger
	// Tracer, when set, records each request as a trace continuing the
	// caller's (Propagator: W3C traceparent unless set); trace.go.
	Tracer     trace.Tracer
	Propagator propagation.TextMapPropagator
	// TraceContent records the request's messages (or prompt, or input)
	// and the answer's text on its span, up to 16 KiB each: off unless an
	// operator turns it on, as the GenAI conventions advise
	// (--trace-content).
	TraceContent bool
	// MaxBody bounds a request body: 16 MiB unless set. Long prompts and
	// images in base64 are large, but not larger.
	MaxBody int64
	// MaxQueue is how many requests may wait for each model, beyond what
	// its replicas' slots are serving: 64 unless set. Beyond it a request
	// is refused with 429 at once, which a client can retry, rather than
	// held until it times out.
	MaxQueue int
	// MaxWait bounds how long a request waits for a replica: for a model
	// loaded on demand to become ready, or for a slot. 2 minutes unless
	// set.
	MaxWait time.Duration
	// FailCooldown is how long a replica that failed a request is avoided
	// while others can serve: 10 s unless set.
	FailCooldown time.Duration
	// CatalogEvery is how long the catalog's names and canaries are kept
	// before they are read again: 1 s unless set, so a canary's new share
	// is followed within a second (at once after Refresh). A name not
	// known is looked up at once, so a model just added is found by its
	// first request.
	CatalogEvery time.Duration
	// TokenEvery is how long an API token that passed is taken as
	// passing before the token store is asked again: 1 s unless set, so a
	// revoked token is refused within a second.
	TokenEvery time.Duration
	// Clock is the time every wait and every while the gateway decides on
	// is read from: a request's wait for a replica and for its turn, its
	// polls, MaxWait, FailCooldown, the Retry-After of a residency, the
	// cold start's length, and how long names and tokens are kept. The
	// real clock unless set; tests step a fake one, rather than sleep to
	// see that nothing happened. A request's arrival and the latencies
	// measured from it (metrics, Traffic, Meters, traces, Server-Timing)
	// and the engine connections' idle time are wall time: they measure
	// the network and the engine, and the arrival is stamped by the
	// access log before the gateway sees the request.
	Clock clock.Clock
}

// Gateway serves the /v1/ routes. Its methods are safe for concurrent use.
// It starts no goroutine of its own: everything it does lives in a request.
type Gateway struct {
	opts  Options
	log   *slog.Logger
	clock clock.Clock // opts.Clock
	// engines carries requests to the engines (engine.go): never through
	// a proxy from the environment, which would see the engine's key, and
	// never following a redirect, which would take the key with it.
	engines *engineClient
	metrics *metrics
	names   names
	tokens  tokens

	mu    sync.Mutex
	pools map[string]*pool // by catalog name

	// splits count each model's requests shared with its canary
	// (split.go); meters are the running Meters (meter.go).
	splits splits
	meters meters
	// spanNames are the traced requests' span names (trace.go).
	spanNames spanNames
	// readyTold says the fleet tells when a replica becomes ready
	// (readyTeller): a request waiting for a cold start is woken then,
	// rather than look every pollCold.
	readyTold bool
	// handedOver is set once this modelserve has handed its port to a
	// new one (HandedOver): no replica starts here any more.
	handedOver atomic.Bool
}

// readyTeller is a fleet that calls fn with a replica's model when the
// replica becomes ready (fleet.Fleet.OnReady).
type readyTeller interface {
	OnReady(fn func(model string))
}

// stoppingTeller is a fleet that calls fn with an engine's endpoint the
// moment before it stops the engine (fleet.Fleet.OnStopping).
type stoppingTeller interface {
	OnStopping(fn func(endpoint string))
}

// New returns a gateway over opts' catalog, fleet and tokens.
func New(opts Options) (*Gateway, error) {
	switch {
	case opts.Catalog == nil:
		return nil, errors.New("the gateway needs the catalog: set Options.Catalog")
	case opts.Fleet == nil:
		return nil, errors.New("the gateway needs the fleet: set Options.Fleet")
	case opts.Tokens == nil:
		return nil, errors.New("the gateway needs the API tokens: set Options.Tokens")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = 16 << 20
	}
	if opts.MaxQueue <= 0 {
		opts.MaxQueue = 64
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = 2 * time.Minute
	}
	if opts.FailCooldown <= 0 {
		opts.FailCooldown = 10 * time.Second
	}
	if opts.CatalogEvery <= 0 {
		opts.CatalogEvery = time.Second
	}
	if opts.TokenEvery <= 0 {
		opts.TokenEvery = time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	m, err := newMetrics(opts.Metrics)
	if err != nil {
		return nil, err
	}
	g := &Gateway{
		opts: opts, log: opts.Log, clock: opts.Clock, metrics: m,
		// No timeout: an answer streams for as long as the engine writes
		// it, and ends when the client goes.
		engines: newEngineClient(),
		names:   names{catalog: opts.Catalog, every: opts.CatalogEvery, clock: opts.Clock},
		tokens:  tokens{every: opts.TokenEvery, clock: opts.Clock},
		pools:   map[string]*pool{},
		splits:  splits{byModel: map[string]*splitCount{}},
	}
	if rt, ok := opts.Fleet.(readyTeller); ok {
		rt.OnReady(g.replicaReady)
		g.readyTold = true
	}
	if st, ok := opts.Fleet.(stoppingTeller); ok {
		st.OnStopping(g.engines.forget)
	}
	return g, nil
}

// replicaReady gives the requests waiting for a replica of model the new
// one's slots, in the order they came.
func (g *Gateway) replicaReady(model string) {
	g.mu.Lock()
	p := g.pools[model]
	g.mu.Unlock()
	if p != nil {
		p.lookAgain()
	}
}

// Close lets go of the kept connections to engines.
func (g *Gateway) Close() { g.engines.closeIdle() }

// pool is the model's routing state, made on first use.
func (g *Gateway) pool(model string) *pool {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.pools[model]
	if p == nil {
		p = newPool(func() []fleet.Replica { return g.opts.Fleet.Serving(model) }, g.clock)
		g.pools[model] = p
	}
	return p
}

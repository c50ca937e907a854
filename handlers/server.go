package handlers

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/gorilla/sessions"

	"modelserve/catalog"
	"modelserve/internal/auth"
	"modelserve/internal/evals"
	"modelserve/internal/fleet"
	"modelserve/internal/gateway"
	"modelserve/internal/mirror"
	"modelserve/internal/updates"
	"modelserve/jobs"
)

// Jobs is what the handlers need of the job server.
type Jobs interface {
	Start(ctx context.Context, req jobs.Request) (jobs.Job, error)
	Get(ctx context.Context, id string) (jobs.Job, error)
	List(ctx context.Context, opts jobs.ListOptions) ([]jobs.Job, int, error)
	Cancel(ctx context.Context, id string) (jobs.Job, error)
	Retry(ctx context.Context, id string) (jobs.Job, error)
	Subscribe(id string) (<-chan jobs.Event, func())
	// Update serves a model's update beside it as its canary; Promote
	// and RollBack decide its trial by hand.
	Update(ctx context.Context, u jobs.UpdateRequest) (jobs.Job, error)
	Promote(ctx context.Context, model, by string) (jobs.Job, error)
	RollBack(ctx context.Context, model, by string) (jobs.Job, error)
	// Restore serves a version the model ran before again (its id in
	// the model's versions).
	Restore(ctx context.Context, model string, id int64, by string) (jobs.Job, error)
	// OnTrial is the job trying an update of model, "" for none.
	OnTrial(model string) string
	// ReloadCost says what an update in place costs model's requests:
	// "requests wait about 4s while chatty's replica reloads".
	ReloadCost(ctx context.Context, model string) string
}

// Versions are each model's versions (catalog.Store).
type Versions interface {
	Versions(ctx context.Context, model string) ([]catalog.Version, error)
}

// Catalog is what the handlers need of the catalog.
type Catalog interface {
	List(ctx context.Context) ([]catalog.Model, error)
	// Page is one window of the catalog, read alone: the API's and the
	// catalog page's.
	Page(ctx context.Context, q catalog.PageQuery) (catalog.Page, error)
	Get(ctx context.Context, name string) (catalog.Model, error)
	Remove(ctx context.Context, name string) error
	// SetScaling is the fleet page's and the API's scale control.
	SetScaling(ctx context.Context, name string, min, max int, idleAfter *time.Duration) error
}

// Mirror is what the handlers need of the mirror.
type Mirror interface {
	List(ctx context.Context) ([]mirror.Entry, error)
	// Flights are the files being fetched, from memory: what the mirror
	// page's stream reads every second.
	Flights() []mirror.Flight
	Handler() http.Handler
	// Shown is a path on the mirror relative to it, and ShownText text
	// with every such path so: an answer never shows where this machine
	// keeps a file.
	Shown(local string) string
	ShownText(text string) string
}

// Fleet is what the handlers show of the fleet (fleet.Fleet): the
// replicas, how each model of the catalog fares, and the nodes with what
// is promised on each.
type Fleet interface {
	Replicas() []fleet.Replica
	ModelHealth() []fleet.ModelHealth
	Nodes() []fleet.NodeStatus
	// Starts are the newest engine starts, with their estimated and
	// measured memory.
	Starts(ctx context.Context, limit int) ([]fleet.Start, error)
}

// Gateway answers OpenAI-compatible requests under /v1/ by model name
// (gateway.Gateway), checking API tokens itself: its errors are in
// OpenAI's shape, which the OpenAI clients read.
type Gateway interface {
	ListModels(w http.ResponseWriter, r *http.Request)
	ShowModel(w http.ResponseWriter, r *http.Request)
	Forward(w http.ResponseWriter, r *http.Request)
	NotFound(w http.ResponseWriter, r *http.Request)
	// AskStream calls a model in-process for the console's playground,
	// by the path a client's request takes, handing on each event's data
	// as the engine writes it.
	AskStream(ctx context.Context, route string, body []byte, each func(data []byte) error) error
	// Traffic is each model's requests in the last minute, for the
	// catalog page.
	Traffic() map[string]gateway.Traffic
	// State is whether a model is loaded, loading or unloaded
	// (gateway.Loaded...): the playground says "loading" by it.
	State(model string) string
}

// Updates is what the handlers need of the watcher for new weights
// (updates.Watcher).
type Updates interface {
	// Check checks a model's branch now.
	Check(ctx context.Context, name string) (updates.Result, error)
	Status(ctx context.Context, name string) (updates.Status, error)
	// Statuses are the catalog page's: one for each model, in order.
	Statuses(ctx context.Context, models []catalog.Model) ([]updates.Status, error)
	// SetSettings gives a model its own interval between checks (nil
	// returns it to the default) and its update policy.
	SetSettings(ctx context.Context, name string, d *time.Duration, policy string, inPlace bool) (updates.Status, error)
	List(ctx context.Context, o updates.ListOptions) ([]updates.Update, error)
	Get(ctx context.Context, id int64) (updates.Update, error)
}

// Evals is what the handlers need of the eval runner (evals.Runner).
type Evals interface {
	// Suite is a model's suite, with no cases when it has none.
	Suite(ctx context.Context, name string) (evals.Stored, error)
	// SetSuite replaces a model's suite with the JSON data holds, by
	// whom; a refusal is a sentence naming the case and the field.
	SetSuite(ctx context.Context, name string, data []byte, by string) (evals.Stored, error)
	// Start runs a model's suite against a target in the background.
	Start(ctx context.Context, model, target string) (evals.Run, error)
	// Runs are a model's newest runs, without their results; Get is one
	// run with them.
	Runs(ctx context.Context, model string, limit int) ([]evals.Run, error)
	Get(ctx context.Context, id int64) (evals.Run, error)
}

// Deps are what the handlers need. New refuses a missing one by name.
type Deps struct {
	DB      *sql.DB
	Jobs    Jobs
	Catalog Catalog
	Mirror  Mirror
	// Metrics serves /metrics; nil serves nothing there. MetricsToken,
	// when set, is the bearer token a scraper must send to read it.
	Metrics      http.Handler
	MetricsToken string
	Log          *slog.Logger
	// Registry reads a repository for the serve page and
	// GET /api/v1/repos/ (hf.Registries).
	Registry Registry
	// Updates checks served models for new weights, and keeps what it
	// found (updates.Watcher).
	Updates Updates
	// Versions are the models' versions (catalog.Store); nil answers
	// none.
	Versions Versions
	// CanaryShare is the share of a model's requests an update's canary
	// takes unless it says (--canary-share), for the update page to say.
	CanaryShare float64
	// Evals keeps each model's eval suite and runs it (evals.Runner).
	Evals Evals
	// Finder searches the registries for the serve page's search box
	// (hf.Registries); nil shows no search box.
	Finder Finder
	// Planner says where a repository's files fit (plan.Planner); nil
	// shows the files without the plan's figures.
	Planner Planner
	// Pool is the hardware planned for (the fleet's nodes), shown on the fleet
	// page and at GET /api/v1/nodes; nil shows no nodes.
	Pool Pool
	// Fleet runs the catalog's replicas, shown on the fleet and catalog
	// pages and at GET /api/v1/replicas and /nodes; nil shows where they
	// would be.
	Fleet Fleet
	// Controls stop and restart replicas and unpark models, from the
	// fleet page and the API; nil takes Fleet's own when it has them
	// (fleet.Fleet does), and without any the pages offer no controls.
	Controls FleetControls
	// Gateway serves /v1/ (the OpenAI-compatible API of the served
	// models); nil serves nothing there.
	Gateway Gateway
	// Rollups are the last hour of each model's requests and each node's
	// memory, minute by minute (rollup.Recorder): charts on the catalog
	// and fleet pages, and series in the API. nil draws none.
	Rollups Rollups
	// Stopping, when closed, ends every event stream the console has
	// open: the server is handing its port to a new process or stopping,
	// and each browser reconnects (the streams' retry field) to whichever
	// process then listens, which sends the page as it stands. Streams
	// would otherwise hold the server's shutdown for its whole grace. nil
	// ends them only with their requests.
	Stopping <-chan struct{}
	// Tokens are the API tokens the console lists, makes and revokes,
	// shared with the gateway so that it hears of a revoke at once
	// (auth.Tokens.OnRevoke); nil keeps them in DB for the console alone.
	Tokens *auth.Tokens
	// Secure marks the session cookie Secure on plain HTTP too: for a
	// console behind a proxy that ends TLS. Over TLS it is always Secure.
	Secure bool
	// PublicURL is modelserve's address as its users reach it
	// (--public-url), which the "call it" panels put in their commands;
	// empty, they use the address each request came to.
	PublicURL string
	// DataDir is the server's data directory, which the token commands
	// the console and the 401 sentences give must name (--data).
	DataDir string
	// TraceURL is where a job's trace is shown (--trace-url): a template
	// with {trace_id}; empty shows the trace id without a link.
	TraceURL string
	// SessionKeys sign and encrypt the session cookie (auth.LoadKeyFile
	// or auth.KeysFromSecret); none makes keys for this process alone, so
	// a restart signs everyone out.
	SessionKeys auth.SessionKeys
	// TrustedProxies are the addresses whose X-Forwarded-For and
	// X-Forwarded-Proto are believed (proxy.go); none believes nobody's.
	TrustedProxies []netip.Prefix
}

// Server holds the handlers' dependencies.
type Server struct {
	deps   Deps
	tokens *auth.Tokens
	events *events
	// The console's: its users, their sessions, the sign-in throttle and
	// the repositories read a moment ago.
	users    *auth.Users
	sessions *sessions.CookieStore
	live     *auth.Sessions
	throttle *throttle
	lookups  lookups
	// measures are the models' measured speeds and the mirror's sizes
	// their estimates are made from, read at most every measuredTTL
	// (model_speed.go).
	measures measures
	// asks are the playground's messages sent and not yet streamed.
	asks *asks
}

// New builds the server and its route table (routes.go).
func New(d Deps) (http.Handler, error) {
	for name, missing := range map[string]bool{
		"DB": d.DB == nil, "Jobs": d.Jobs == nil, "Catalog": d.Catalog == nil, "Mirror": d.Mirror == nil,
		"Registry": d.Registry == nil, "Updates": d.Updates == nil, "Evals": d.Evals == nil,
	} {
		if missing {
			return nil, errors.New("handlers: Deps." + name + " is required")
		}
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Controls == nil {
		d.Controls, _ = d.Fleet.(FleetControls)
	}
	if d.CanaryShare == 0 {
		d.CanaryShare = jobs.DefaultShare
	}
	if d.Tokens == nil {
		d.Tokens = auth.NewTokens(d.DB)
	}
	s := &Server{deps: d, tokens: d.Tokens, events: newEvents(d.Stopping),
		users: auth.NewUsers(d.DB), sessions: newSessionStore(newKeysIfNone(d.SessionKeys)), live: auth.NewSessions(d.DB),
		throttle: newThrottle(), asks: newAsks()}
	return s.routes(), nil
}

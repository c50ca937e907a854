package jobs

import (
	"context"
	"database/sql"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"time"

	"modelserve/catalog"
	"modelserve/internal/canary"
	"modelserve/internal/fleet"
	"modelserve/internal/gguf"
	"modelserve/internal/hf"
	"modelserve/internal/mirror"
	"modelserve/internal/notify"
	"modelserve/internal/plan"
)

// Registry reads a repository at a revision (hf.Client, hf.Local).
type Registry interface {
	Repo(ctx context.Context, id, revision string) (hf.Repo, error)
	// Refs lists the repository's branches and tags: whether the
	// revision asked for is a branch, which the catalog records so that
	// only a model served from a branch is watched for new weights.
	Refs(ctx context.Context, id string) (hf.Refs, error)
	// DownloadURL is where the mirror fetches a file of the repository at a
	// commit.
	DownloadURL(id, commit, path string) string
}

// downloadChecker is a registry that can tell, before anything is fetched,
// whether its token may download a repository's files. The Hub can refuse
// a gated repository's files while it lists them to anyone; a local folder
// never refuses, and need not implement it.
type downloadChecker interface {
	CanDownload(ctx context.Context, repo hf.Repo, path string) error
}

// Mirror fetches files into the mirror, resuming what is partly there and
// checking each against its published sha256 (mirror.Mirror).
type Mirror interface {
	Fetch(ctx context.Context, files []mirror.File, progress func(mirror.Progress)) ([]string, error)
	// Remove takes a file off the mirror; inUse may be nil.
	Remove(ctx context.Context, model, revision, path string, inUse func(local string) bool) error
}

// Catalog adds a model (catalog.Store). Add replaces a model of the same
// name; AddNew refuses one with catalog.ErrExists.
type Catalog interface {
	Add(ctx context.Context, m catalog.Model, by string) error
	AddNew(ctx context.Context, m catalog.Model, by string) error
	// Get and Remove are an update's: it reads the model it updates, and
	// removes the canary once judged.
	Get(ctx context.Context, name string) (catalog.Model, error)
	Remove(ctx context.Context, name string) error
	// SetShare is the part of its model's requests a canary takes.
	SetShare(ctx context.Context, name string, share float64) error
	// SetScaling changes how many replicas of a model run, and nothing
	// else of it, so its running replicas run on: an update in place of
	// one of several replicas moves one replica's room from the model to
	// its new version.
	SetScaling(ctx context.Context, name string, min, max int, idleAfter *time.Duration) error
}

// Planner says which file of a repository suits the cluster's hardware and
// where each file can run (plan.Planner). It is optional: without one, a job
// takes Q4_K_M and runs it on this node's CPU.
type Planner interface {
	Plan(ctx context.Context, repo hf.Repo, req plan.Request) (plan.Plan, error)
}

// Gateway sends a request to a served model by its name, as clients'
// requests go: routed to a ready replica, with its engine's key added.
type Gateway interface {
	Ask(ctx context.Context, route string, body []byte) ([]byte, error)
}

// Metrics is told of jobs and steps as they end; internal/metrics
// implements it.
type Metrics interface {
	// JobStarted counts a job this process begins running: a new one, a
	// retry (a new job), and one resumed after a restart.
	JobStarted()
	// JobEnded counts a job that reached done, failed or cancelled.
	JobEnded(state string)
	// StepDone records how long a step took to get done.
	StepDone(step string, d time.Duration)
}

// Deps are what a Server needs. DB, Registry, Mirror and Catalog are
// required; New refuses a Server without one.
type Deps struct {
	// DB holds the jobs and their steps (migrations/0003_jobs.sql).
	DB       *sql.DB
	Registry Registry
	Mirror   Mirror
	Catalog  Catalog
	// Fleet starts the replicas a catalog entry asks for. Without one, a
	// job ends once the model is in the catalog.
	Fleet Fleet
	// Planner chooses a file and where it runs; without one, Q4_K_M on
	// this node's CPU.
	Planner Planner
	// EngineBuild is the llama.cpp build number the nodes run (11669 for
	// b11669), which decides the architectures the check step accepts; 0
	// when unknown.
	EngineBuild int
	// Architectures are those the engine build runs: the embedded list
	// (gguf.KnownArchitectures) when nil, plus any the operator adds.
	Architectures gguf.Known
	// VLLM is the vLLM the fleet runs original weights with: the image
	// (--vllm-image, vllm/vllm-openai:v0.11.0) whose tag names its release,
	// or the release of this machine's vllm (0.11.0; "unknown" when it does
	// not say), which decides the model classes the check step accepts.
	// Empty when the fleet starts no vLLM: a serve of original weights
	// then ends at its plan step, saying so.
	VLLM string
	// Pool is the fleet's nodes as the planner sees them, with what each
	// has free: what the check step sizes a model against (plan.Size), as
	// the plan step did. Nil when nothing says; then a model gets the
	// default context, unshrunk.
	Pool func() []plan.Node
	// Gateway sends the smoke test to the model as a client's request
	// goes (gateway.Gateway); required with a Fleet.
	Gateway Gateway
	Log     *slog.Logger
	// Poll is how often placement looks at the fleet; 200ms unless set.
	Poll time.Duration
	// ReadyTimeout bounds the wait for a replica: the node fetching the
	// weights from the mirror and the engine loading them. 30 minutes
	// unless set.
	ReadyTimeout time.Duration
	// SmokeTimeout bounds the smoke test: one short reply, but a big
	// model on a CPU reads its prompt for minutes before the first token,
	// and an engine may still be loading it: five minutes unless set, as
	// the seed learned, before it is called not answering.
	SmokeTimeout time.Duration
	// UnplacedGrace is how long a model may go unplaced before the job
	// stops waiting for it; a minute unless set.
	UnplacedGrace time.Duration
	// MirrorNoProgress ends a mirror step whose files have not grown for
	// that long while one of them is being fetched; 10 minutes unless set.
	// MirrorWithin ends one still fetching after that long; six hours
	// unless set, as the reference pipeline bounds it (mirror_bounds.go).
	MirrorNoProgress time.Duration
	MirrorWithin     time.Duration
	// Metrics, when set, is told of jobs and steps.
	Metrics Metrics
	// Notify is told of jobs failed and updates promoted or rolled back
	// (--notify-url); nil tells no one.
	Notify *notify.Notifier
	// Tracer, when set, records each run of a job as a trace (trace.go).
	Tracer trace.Tracer
	// TraceContent lets the traces carry what a model said (the smoke
	// test's answer), as --trace-content does the gateway's; off, they
	// carry how it answered but not what.
	TraceContent bool

	// What an update needs (Server.Update): the updates noticed, and
	// where versions end. Without Updates no update is served.
	Updates  Updates
	Versions Versions
	// Meters measure each version's requests on the gateway, and Evals
	// run the model's eval suite; a trial without one is judged without
	// it, and says so.
	Meters Meters
	Evals  Evals
	// Policy judges a canary: canary.DefaultPolicy unless set. Share is
	// the part of a model's requests its canary takes unless the update
	// says: DefaultShare unless set.
	Policy canary.Policy
	Share  float64
	// Starts are the fleet's engine starts that became ready
	// (fleet.Fleet.Starts): how long a model's replica takes to load, which
	// an update in place makes its requests wait. Without it the job says
	// they wait, not for how long.
	Starts Starts
}

// Starts lists the newest limit engine starts, newest first.
type Starts interface {
	Starts(ctx context.Context, limit int) ([]fleet.Start, error)
}

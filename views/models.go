// Package views renders the operator console: templ components, each a pure
// function of a typed view model defined here.
//
// Handlers turn jobs, catalog entries, mirror files and plans into these
// models — words, figures already formatted, URLs — so that a component
// only lays them out, and one component renders the same piece for a full
// page, an htmx fragment and a server-sent event alike. Nothing here reads
// a database or knows how a job runs.
package views

// Layout is what every page shares: the top bar and the assets.
type Layout struct {
	Title string
	// Page names the page in the top bar ("serve", "jobs", ...), marked
	// as the current one.
	Page string
	// User is who is signed in; empty on the sign-in page, which then
	// shows no navigation.
	User string
	// CSRF is the session's token: every form carries it, and htmx sends
	// it as a header.
	CSRF   string
	Assets Assets
}

// Assets are the cache-busted URLs of the stylesheets and scripts.
type Assets struct {
	Pico, CSS, HTMX, SSE, App string
}

// Login is the sign-in page.
type Login struct {
	Layout Layout
	Name   string
	// Next is the local path to go to after signing in.
	Next  string
	Error string
}

// Message is a page that says one thing: an error, or that something is
// not there.
type Message struct {
	Layout  Layout
	Heading string
	Text    string
	// Back is a link to go on from here, with its words.
	Back, BackText string
}

// State is a state shown as an icon and a word, never by colour alone.
type State struct {
	// Word is what is shown: "running", "done", "failed", "skipped",
	// "cancelled", "waiting", "not run".
	Word string
	// Key is Word as a CSS class suffix ("not-run").
	Key string
}

// Step is one of a job's seven steps.
type Step struct {
	Name   string
	State  State
	Detail string
	// Took is how long it ran ("1.2 s", "3 min 20 s"), "" before it starts.
	Took string
	// Progress is the mirror's download, while it has one.
	Progress *Progress
}

// Progress is a download under way.
type Progress struct {
	Done, Total int64 // bytes, for <progress>
	// Text is "3.1 of 4.9 GB (63%)".
	Text string
	// Rate is "45.2 MB/s" and Left "2 min 10 s", "—" until known.
	Rate, Left string
}

// Segment is one step's share of a job's time on the timeline.
type Segment struct {
	Name  string
	Key   string // Name as a CSS class suffix ("smoke-test")
	State State
	Took  string
	// Share is the percentage of the job's time so far, for the width,
	// and ShareText the same in words ("87%").
	Share     float64
	ShareText string
}

// Job is the job page's live part: everything that changes as the job
// runs. The full page and every server-sent event render it.
type Job struct {
	ID         string
	Model      string
	Repo       string
	Revision   string
	Commit     string
	State      State
	Started    string
	StartedISO string
	Took       string
	Steps      []Step
	Timeline   []Segment
	// OnDemand is a job done without starting a replica: its model was
	// added to load when first asked for.
	OnDemand bool
	// Of is the model an update's job tried a new version of (Model is
	// the version's own name, gone from the catalog once the verdict is
	// in); "" for a job that served a model.
	Of string
	// Reply and TokensPerSecond are the smoke test's answer, once done;
	// NoText is a smoke test the model answered with no text, which the
	// page says rather than leave "Served." alone.
	Reply           string
	TokensPerSecond string
	// Restored is a restore's job done: Of serves the version again.
	// VersionsURL is Of's version history, for an update or a restore.
	Restored    bool
	VersionsURL string
	NoText      bool
	// Error is the sentence the job failed with, and FailedStep where
	// (jobs.Job.EndStep: the step that decided a roll-back). DecidedBy is
	// what that step said of a trial rolled back (State "rolled back").
	Error      string
	FailedStep string
	DecidedBy  string
	CanCancel  bool
	CanRetry   bool
	RetryOf    string
	// Refused is a job refused as it asked (jobs.Job.Refused): not
	// retried, as it would fail the same way; Offers are what would fit
	// in its place, as the plan says now.
	Refused bool
	Offers  []Offer
	// TraceID is the trace of the job's latest run, and TraceURL where
	// the operator's trace viewer shows it (empty without --trace-url).
	TraceID, TraceURL string
	// CSRF is the token the Cancel and Retry forms carry: they are part of
	// what an event swaps.
	CSRF string
	// Playground and CallIt are the served model's playground URL and
	// how to call it from code, once the job has served one that the
	// catalog still has.
	Playground string
	CallIt     *CallIt
}

// Offer is a request that would fit in place of one refused: What says
// it in a sentence, Button takes it, and Fields are the serve form's
// values it posts.
type Offer struct {
	What, Button string
	Fields       []Field
}

// Speed is a model's tokens a second: the plan's estimate and what it is
// from, and once a job has served it, what its smoke test measured (By,
// and the job at JobURL). Each is "" when not known.
type Speed struct {
	Estimate, From       string
	Measured, By, JobURL string
	// Glance is the figure a table's cell shows ("123", "≈ 473"), the
	// measure when there is one, and GlanceHow what it is ("measured",
	// "estimated"); both "" when neither is known.
	Glance, GlanceHow string
}

// JobPage is the job page.
type JobPage struct {
	Layout Layout
	Job    Job
	// Stream is the URL of the job's event stream; empty once the job has
	// ended, when nothing is left to watch.
	Stream string
}

// JobRow is one job in the list.
type JobRow struct {
	ID, URL, Model, Repo string
	// Kind is what the job does, as its record says: "serve", "update".
	Kind                string
	State               State
	Step                string
	Started, StartedISO string
	Took                string
	// Outcome is how it ended in a word or two ("served", "on demand",
	// "promoted", "rolled back", "refused", "failed at mirror",
	// "cancelled"), "" while it runs; Why is the sentence it failed
	// with, "" for none.
	Outcome State
	Why     string
}

// Jobs is the list of jobs: the live part of the jobs page.
type Jobs struct {
	Rows  []JobRow
	Total int
	// Older is a page past the newest, reached by a cursor.
	Older bool
	// Newest links back to the newest jobs, and Next on to older ones;
	// each is empty where there is nowhere to go.
	Newest, Next string
}

// JobsPage is the jobs page.
type JobsPage struct {
	Layout Layout
	Jobs   Jobs
	Stream string
}

// CatalogModel is one model of the catalog.
type CatalogModel struct {
	Name        string
	Aliases     string
	Description string
	Source      string
	// Repo and Commit are where the weights came from; empty for a model
	// added without an origin. VersionsURL is its version history, ""
	// for a model without an origin and for a version on trial.
	Repo, Commit string
	VersionsURL  string
	Context      string
	Class        string
	Role         string
	Profiles     []CatalogProfile
	// Wanted is the scaling ("1 to 2", "on demand"), Running how the
	// fleet fares with it ("1 of 1 ready", "parked: <reason>"). IdleAfter
	// is how long its replicas on demand wait for a request ("idle after
	// 15 min (the default)"), "" when it keeps every replica it may run.
	Wanted       string
	IdleAfter    string
	Running      string
	Capabilities []string
	RemoveURL    string
	// Traffic is its requests in the last minute ("12 requests, 1
	// failed", "none") and Latency their median ("p50 340 ms"), "" when
	// not known; both "" without a gateway.
	Traffic, Latency string
	// Speed is its tokens a second, estimated and measured.
	Speed Speed
	// Playground is the URL of its playground, and CallIt how to call it
	// from code.
	Playground string
	CallIt     CallIt
	// Evals is the URL of its eval suite's page.
	Evals string
	// Watch is what the watcher for new weights knows of it, in a
	// sentence ("branch main: checked 5 min ago, up to date at
	// abc1234"); CheckURL is the Check now form's action, "" for a model
	// not watched; UpdateURL the page of the update available to it, ""
	// for none.
	Watch, CheckURL, UpdateURL string
	// Trial says what a canary is on trial beside, and on how much of its
	// traffic; "" for a model. TrialTag says it in a word or two for the
	// row ("canary, 10%").
	Trial, TrialTag string

	// What the row shows at a glance, each a few characters; the
	// sentences above are in the row's details.
	//
	// Status is the fleet's state of the model ("ready", "parked", ...),
	// zero without a fleet. Size is the first profile's context a
	// request and slots ("8192 × 4"). Replicas is ready of wanted
	// ("1/1"), "" without a fleet. Memory is what the first profile
	// holds ("937.9 MB RAM", "9.6 GB × 2 cards").
	Status   State
	Size     string
	Replicas string
	Memory   string
	// Charts are its last hour at the gateway.
	Charts ModelCharts
}

// CatalogProfile is one way a model runs.
type CatalogProfile struct {
	// Runs says in words how it runs: its pool and slots, what it holds.
	Name, Engine, Hardware, Runs string
}

// CatalogPage is the catalog page.
type CatalogPage struct {
	Layout Layout
	Models []CatalogModel
	Notice string
	// TrafficWindow is how far back Traffic looks ("the last minute").
	TrafficWindow string
	// Stream is the page's event stream, which swaps CatalogModels as
	// it changes.
	Stream string
	// Window says which of the catalog's models the page shows ("models
	// 1 to 25 of 500"), empty when it shows them all; Next is the page of
	// those after them and First the first page, empty when there is
	// none to go to.
	Window, Next, First string
}

// Confirm asks whether to do something that cannot be undone, for a
// browser without JavaScript (with it, hx-confirm asks).
type Confirm struct {
	Layout   Layout
	Heading  string
	Text     string
	Action   string
	Button   string
	Cancel   string
	Hidden   []Field
	Destroys bool
}

// Field is a hidden form field.
type Field struct{ Name, Value string }

// MirrorFile is one file on the mirror.
type MirrorFile struct {
	Model, Revision, Path string
	Size                  string
	SHA256, SHA256Short   string
	State                 State
	Progress              *Progress
	Err                   string
	// Removable is false while the file is being fetched.
	Removable bool
	// Jobs are the jobs waiting on the file while it is fetched.
	Jobs []string
	// Waiters is how many fetches wait on it, when the jobs are not known.
	Waiters int
	// Version is which version of its model the file's commit is
	// ("current version 2", "retired version 1"), "" when no version
	// names it; VersionsURL the model's version history.
	Version, VersionsURL string
}

// MirrorPage is the mirror page.
type MirrorPage struct {
	Layout Layout
	Live   MirrorLive
	Notice string
	// Stream is the page's event stream.
	Stream string
}

// MirrorLive is what of the mirror page changes while files arrive.
type MirrorLive struct {
	Files []MirrorFile
	Total string
	CSRF  string
}

// Bar is a horizontal bar of parts against a whole: memory used by
// weights, KV cache and engine against a node's RAM or a card's memory.
type Bar struct {
	// Label says what the bar is of ("1×L4", "node-1 RAM").
	Label string
	Parts []BarPart
	// Capacity is where the whole ends, as a percentage of the bar's
	// width (100 unless the parts overflow it).
	Capacity float64
	// Text says in words what the bar shows; it is the bar for anyone who
	// does not see it.
	Text string
	// Over is whether the parts do not fit the whole.
	Over bool
}

// BarPart is one part of a bar.
type BarPart struct {
	Name  string // "weights", "KV cache", "engine", "used", "free"
	Key   string // CSS class suffix
	Share float64
	Text  string // "4.1 GB"
}

// Node is one machine of the pool, or of the fleet.
type Node struct {
	Name    string
	Local   bool
	CPU     string
	RAM     string
	FreeRAM string
	// Memory is the RAM in use against free; on a node the fleet runs,
	// one part per replica, then what else is used, then free.
	Memory Bar
	GPUs   []NodeGPU
	// Cards are the fleet's view of the node's GPUs, one by one, with the
	// replica holding each.
	Cards []NodeCard
	Note  string
	// Memory is its memory over the last hour; none drawn when it has
	// no Lines.
	MemoryChart Chart
}

// NodeCard is one GPU of a node the fleet runs, and who holds it.
type NodeCard struct {
	// Name is "#0 L4, 24 GB"; Holder the replica holding it, "" for free.
	Name, Holder string
}

// NodeGPU is a node's cards of one class.
type NodeGPU struct {
	Class, Count, Memory, Free, Bandwidth string
	Bars                                  []Bar
}

// FleetPage is the fleet page.
type FleetPage struct {
	Layout Layout
	Nodes  []Node
	// NoPool says why no nodes are shown, when none are.
	NoPool string
	// HasFleet is false when nothing runs replicas: the page keeps their
	// place.
	HasFleet bool
	Replicas []FleetReplica
	Models   []FleetModel
	// Starts are the recent engine starts, newest first.
	Starts []FleetStart
	// Swaps are the last replicas given back for another model, newest
	// first.
	Swaps []FleetSwap
	// AsOf is when the figures were read ("12:00:03 UTC").
	AsOf string
	// Stream is the page's event stream, "" for a page that does not
	// change (no fleet).
	Stream string
	// Notice says what the control just used did. NoticeUntilReady names
	// the replica whose readiness ends it (a restart), and NoticeReady is
	// what it says then.
	Notice, NoticeUntilReady, NoticeReady string
	// CSRF is the session's token, for the controls' forms.
	CSRF string
}

// ReplicaLog is a replica's engine log page.
type ReplicaLog struct {
	Layout Layout
	ID     string
	Lines  []string
	AsOf   string
}

// FleetReplica is one running copy of a model.
type FleetReplica struct {
	ID, Model, Profile, Node string
	// Engine names what runs it: "llama.cpp", "vLLM".
	Engine string
	// Endpoint is the engine's base URL, "" while it has none.
	Endpoint string
	State    State
	// Detail says more about the state: why it is stopping, when it
	// restarts.
	Detail string
	// Started is when its engine started ("12:00:03 UTC"), "" before;
	// ReadyIn how long it took to load ("3.2 s"), "" until ready.
	Started, StartedISO, ReadyIn string
	// Memory is what it uses, measured or estimated, in words, and
	// MemoryGlance the figure alone for the row ("937.9 MB", "≈ 900 MB"
	// while only estimated).
	Memory, MemoryGlance string
	// Load is what its engine says of its work ("1 of 4 slots busy, none
	// waiting; …"), "" until it is ready; Busy the same for the row
	// ("1/4 busy, 2 waiting") and Size its context a slot and slots
	// ("8192 × 4").
	Load, Busy, Size string
	// Process is "pid 1234, started with --threads 4", "" without an
	// engine process;
	// PID the number alone.
	Process, PID string
	// CanStop and CanRestart offer the controls: not to a replica that is
	// stopping or has ended.
	CanStop, CanRestart bool
	// Failures is how often its engine ended unasked; LastError the last
	// such ending, in the engine's words.
	Failures  int
	LastError string
	// Log is the engine's last lines, written as text: what an engine
	// writes is not to be trusted as markup.
	Log []string
}

// FleetStart is one engine start that became ready, with the memory it was
// placed by beside the memory it was measured to hold.
type FleetStart struct {
	Replica, File string
	// Ready is when it became ready ("12:00:03 UTC").
	Ready, ReadyISO string
	// Context is a slot's context × slots ("4096 × 4"), ContextWords
	// the same as a sentence ("16384 tokens in 4 slots of 4096").
	Context, ContextWords string
	// Estimate and Measured are sizes ("1.2 GB"); Error is how far the
	// estimate was from the measure ("measured 12% under").
	Estimate, Measured, Error string
}

// FleetSwap is one replica given back to make room for another model:
// the model out, the model in, why, and how long the model in took to
// load once it had the room.
type FleetSwap struct {
	// Out is the replica given back, OutModel its model; In the model it
	// was given back for.
	Out, OutModel, In string
	// Why is the fleet's reason ("idle for 27 s"), without the names.
	Why string
	// At is when the model in became ready ("12:00:03 UTC"), LoadedIn how
	// long its engine took ("1.2 s"); both "" until it has.
	At, AtISO, LoadedIn string
}

// FleetModel is how the fleet fares with one model of the catalog.
type FleetModel struct {
	Name, Class string
	// LastStop is the last of its replicas given back to make room for
	// another model, and why ("tiny-1: given back for chatty, idle for 4
	// min"); "" when none has been.
	LastStop string
	// Replicas is "1 of 1 ready".
	Replicas string
	// Status is "ready", "starting", "parked", "waiting for room", "no
	// room anywhere" or "on demand".
	Status State
	// Reason is why a parked model is parked; Placement, line by line,
	// what holds a model waiting for room.
	Reason    string
	Placement []string
	// Requests are its requests in the gateway's last minute, in words;
	// "" without a gateway.
	Requests string
	// Parked offers Unpark when CanControl; CanScale offers the scaling
	// form with the catalog's Min, Max and IdleAfter ("30s"; "" for the
	// default, which IdleDefault says: "15m").
	Parked, CanControl, CanScale bool
	Min, Max                     int
	IdleAfter, IdleDefault       string
	// Speed is its tokens a second, estimated and measured.
	Speed Speed
	// Charts are its last hour at the gateway.
	Charts ModelCharts
}

// UpdatePage is the page of one update: a served model's branch moved to
// new weights.
type UpdatePage struct {
	Layout Layout
	ID     string
	Model  string
	// ModelURL is the catalog's row of the model, "" when the catalog no
	// longer has it; VersionsURL its version history.
	ModelURL    string
	VersionsURL string
	Repo        string
	Ref         string
	// OldCommit and NewCommit are in full, for a title; OldShort and
	// NewShort as people write them.
	OldCommit, NewCommit string
	OldShort, NewShort   string
	Noticed, NoticedISO  string
	State                State
	Files                []UpdateFile
	// Note says how the update stands against the model now: promoted,
	// rolled back, served again since, or removed.
	Note string
	// Promoted is an update the model took: the old commit is what it
	// ran, the new what it runs.
	Promoted bool
	// CheckURL is the Check now form's action, "" when the model is not
	// watched.
	CheckURL string
	// TryURL is the form that serves the update beside the model as its
	// canary, "" when it cannot be tried now. TrialURL is the job trying
	// it, with PromoteURL and RollBackURL its hand controls, while it is
	// on trial.
	TryURL, TrialURL, PromoteURL, RollBackURL string
	Share                                     string
	// NoRoom says what becomes of the update when there is no room beside
	// the model: tried in place, and what that costs its requests, or
	// refused as the model's settings say.
	NoRoom string
	// TrialWhere is where the update is on trial: "beside chatty", or "in
	// place of chatty's replica".
	TrialWhere string
}

// UpdateFile is one changed file of an update, sizes in words.
type UpdateFile struct {
	Path             string
	OldSize, NewSize string
	OldSHA, NewSHA   string
	Gone             bool
}

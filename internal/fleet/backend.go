package fleet

import (
	"context"
	"time"

	"modelserve/catalog"
)

// The fleet is one controller over a backend. The controller (controller.go,
// pass.go) owns every rule: what each model wants (Demands), which replicas
// are surplus and how they drain (Drains), when a model is parked, where a
// replica goes and whose room it takes (MakeRoom), and every sentence said
// of them. A Backend answers only what differs between where replicas run:
// which nodes there are and what they hold, how a replica is started and
// stopped, and what its engine is doing. The local backend (processes.go)
// runs engines as child processes of modelserve; a cluster's
// (internal/kubefleet) is the other.
//
// How the Kubernetes backend fits (internal/kubefleet/backend.go):
//
//   - Nodes are the cluster's nodes, each with its allocatable memory, of
//     which what pods other than the fleet's request is not available;
//     Local is false. The replicas' pods are the controller's to count.
//   - Check is the weights' place in the mirror and whether the cluster
//     can run the engine's image (weightsOf, canRun).
//   - Start has the Deployment of the model's profile one replica more,
//     written with its owner ConfigMap, Service and key Secret by a
//     worker of the backend's after the pass (the fleet's Sync waits for
//     it). The scheduler places the pod: Placement.Node is a hint, and
//     Observation.Node says where the pod was bound, where its room is
//     counted. Pods are named by their ReplicaSet, so the backend pairs
//     the controller's id with the next pod of that Deployment running
//     what the replica was started with, and answers for it by that pod.
//   - Stop deletes the pod once the controller's drain is over, then
//     lowers its Deployment by one: lowered first, the ReplicaSet would
//     choose which pod goes. Restart deletes the pod alone, for its
//     ReplicaSet to make another. Events.Ended is told once the pod is
//     gone.
//   - Observe reads the informer's pod: its phase, readiness and init
//     container as the State and Detail (the scheduler's own sentence
//     for a pod with nowhere to go), its IP as the endpoint, its key
//     Secret as the Key. The kubelet restarts a failed engine itself: the
//     backend tells Events.Failed of each restart once, ignores the wait,
//     and deletes the pod when told its model is parked; a pod ready for
//     a minute is told to Events.Stable, as an engine is locally. Parks
//     are kept by the controller (Options.Parks) in the store the backend
//     gives it: annotations on the model's owner ConfigMap.
//   - What a pod runs beyond its catalog entry (its image, the
//     PriorityClass of its model's class) is the backend's Runs
//     (Runner): a change replaces the pods, drained, as a changed entry
//     does, and a Deployment's template is rewritten only once the pods
//     of the one before have gone.
//   - Pods outlive modelserve: Adopt takes back every running pod of the
//     fleet's the informer finds at Run, each a replica named by its pod,
//     with the fingerprint its template was written with. Outlives is
//     always true.
//   - PID, RSS, threads measured, the engine's load and its output are
//     not read from a cluster: the controller depends on none of them.

// Backend starts, stops and watches replicas for the controller. Its
// methods are called with the controller's lock held, and must not call
// back into Events while they run: a backend's own lock is taken inside
// the controller's, never the other way round.
type Backend interface {
	// Nodes are the nodes replicas may run on, with their hardware as
	// measured now, in the same order on every call. It is called outside
	// the controller's lock: a node may take a moment to answer.
	Nodes() []NodeInfo
	// Check is why no replica of m can start at all: an error wrapping
	// ErrEngineMissing when its engine is not installed (the model is
	// parked until it is), any other (its weights are not where the
	// backend reads them) parks it until it is served again. Nil when
	// it may start. Check of the zero Model is whether the backend's
	// default engine is there at all: the controller warns when it is not,
	// and starts again the models parked for want of it once it is.
	Check(m catalog.Model) error
	// Start starts a replica of m's profile as the controller placed it,
	// and returns at once: its engine loads meanwhile, and Observe says
	// how it goes. A backend whose scheduler places replicas takes the
	// placement as a hint.
	Start(ctx context.Context, p Placement) error
	// Stop stops replica id's engine, why being the controller's reason:
	// its drain is over (or it is to go at once, modelserve stopping).
	// Events.Ended is called once the engine has exited.
	Stop(id, why string)
	// Restart stops replica id's engine and starts it again in its
	// place, not counted as a failure, saying why in its log.
	Restart(id, why string)
	// Observe is what replica id's engine is doing now; false for a
	// replica the backend does not have (it ended).
	Observe(id string) (Observation, bool)
	// Log is replica id's last lines of its engine, and Note adds one of
	// modelserve's to them.
	Log(id string) []string
	Note(id, line string)
	// Wait returns once every engine the backend started has exited,
	// after the context each was started with ended, or been left
	// running (Outlives).
	Wait()
	// Adopt is called once at each Run's start, before its first pass,
	// for the replicas a modelserve before this one left running that
	// the backend takes back: each checked to be the engine it started
	// (never trusted on its record alone) and answering with its key,
	// ready, its supervision begun as Start's would be. Those failing a
	// check are the backend's to end or drop; none is listed. A Run
	// before's replicas on this backend are forgotten first.
	Adopt(ctx context.Context) []Adopted
	// Outlives is whether engines still running when the context they
	// were started with ends are left running for the next modelserve to
	// adopt, rather than stopped: all but those retiring (stopping or
	// draining), which are stopped as before. The controller then keeps
	// its last view of them answering (Replicas, Serving) for a gateway
	// still finishing requests, and does no more reconciling.
	Outlives() bool
}

// NodeInfo is a node as its backend reports it.
type NodeInfo struct {
	Name string
	// Local is this machine, whose memory the planner may also read.
	Local    bool
	Capacity Capacity
}

// Placement is a replica the controller starts: its id, model and
// profile, and where it goes (a hint to a backend whose scheduler
// decides).
type Placement struct {
	ID      string
	Model   catalog.Model
	Profile catalog.Profile
	Node    string
	// Cards are the node's cards it holds, by index; none for a replica
	// on RAM alone.
	Cards []int
	// Cores are the CPU cores of every node whose hardware could host
	// it: an engine whose profile does not say its threads is given as
	// many on whichever it lands.
	Cores []int
	// Fingerprint is the catalog entry's (Fingerprint) it was started
	// from, and what more its backend runs it with ("+" and Runner's
	// Runs), if anything.
	Fingerprint string
}

// Observation is what a replica's engine is doing, as its backend sees it.
type Observation struct {
	// State is Starting, Loading or Ready while it runs; the controller
	// says Draining and Stopping itself.
	State    State
	Detail   string
	Endpoint string
	// Node is the node it runs on, when its backend's scheduler bound it
	// to another than it was placed on; "" where it was placed. Its room
	// is counted there.
	Node string
	// Key is the key its engine wants (--api-key).
	Key      string
	PID      int
	Threads  int
	Failures int
	// LastError is its last failure, in the engine's words.
	LastError string
	// Started is when its current engine started; ReadyAt when it became
	// ready, the zero time until then.
	Started, ReadyAt time.Time
	RSSBytes         int64
	Load             *Load
	// Engine is what runs it: "llamacpp" or "vllm".
	Engine string
}

// Failure is how an engine's run ended that nobody asked to end, as the
// controller counts it towards a park.
type Failure int

const (
	// FailedStart: it ended, or was killed at its deadline, before it
	// was ready.
	FailedStart Failure = iota + 1
	// CrashedEarly: it ended soon after it was ready, as good as a
	// failed start.
	CrashedEarly
	// CrashedLate: it ended after serving a while; restarted, not held
	// against it.
	CrashedLate
	// NoEngine: no engine is installed; parked until there is one.
	NoEngine
	// BadEngine: an engine that cannot be run; no restart can help.
	BadEngine
)

// StableAfter is how long a replica serves before its model's failed
// starts are forgiven (Events.Stable): an engine that loads and dies at
// its first request is failing to start as surely as one that never loads.
const StableAfter = time.Minute

// CrashOf is what an engine's end that nobody asked for is, after it
// served for servedFor: as good as a failed start within StableAfter, a
// late crash after it.
func CrashOf(servedFor time.Duration) Failure {
	if servedFor < StableAfter {
		return CrashedEarly
	}
	return CrashedLate
}

// Events are what a backend tells the controller of its replicas. Each
// takes the controller's lock: a backend calls them without its own held.
type Events interface {
	// Ready: replica id's engine became ready, or has said how many
	// requests it serves at once; whoever waits for its model is told.
	Ready(id string)
	// Stopping: the engine at endpoint is about to be stopped; whoever
	// keeps connections to it closes them.
	Stopping(endpoint string)
	// Retiring is whether replica id is being retired: an engine that
	// ends meanwhile is not started again.
	Retiring(id string) bool
	// Failed counts a failure of replica id's engine, why in its words,
	// and says how long to wait before starting it again, or that its
	// model is parked and it is to end.
	Failed(id string, kind Failure, why string) (wait time.Duration, park bool)
	// Stable: replica id has served long enough that its model's failed
	// starts are forgiven.
	Stable(id string)
	// Ended: replica id's engine has exited for good, its room given
	// back; last is what it was at its end, and log its last lines. A
	// replica ended Failed (its model parked) is still shown until its
	// model is unparked or served again.
	Ended(id string, last Observation, log []string)
}

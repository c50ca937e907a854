package jobs

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"time"
)

// The states of a job. A job is Running until it ends Done, Failed or
// Cancelled; a step is Running, Done, Failed or Skipped.
const (
	Running   = "running"
	Done      = "done"
	Failed    = "failed"
	Cancelled = "cancelled"
	Skipped   = "skipped"
	// RolledBack is a trial's step that decided its version was rolled
	// back (its eval, its canary), and its verdict then: the job ends
	// failed, as a trial not promoted does, and says so (Job.RolledBack).
	RolledBack = "rolled back"
)

// The kinds of job: one that serves a model, one that serves a model's
// update beside it and judges it (Server.Update), and one that serves a
// version it ran before again (Server.Restore).
const (
	KindServe   = "serve"
	KindUpdate  = "update"
	KindRestore = "restore"
)

// The steps of a job, in the order it goes through them.
const (
	StepRegistry  = "registry"
	StepPlan      = "plan"
	StepMirror    = "mirror"
	StepCheck     = "check"
	StepCatalog   = "catalog"
	StepPlacement = "placement"
	StepSmoke     = "smoke test"
	// An update's, after the smoke test: the eval suite on both versions
	// before the canary takes traffic, the canary on its share of it, and
	// the verdict (promoted or rolled back).
	StepEval    = "eval"
	StepCanary  = "canary"
	StepVerdict = "verdict"
	// A restore's, after the smoke test: the model's replicas restart on
	// the version restored while it takes every request.
	StepRestore = "restore"
)

// Step is one stage of a job, and what it is doing or did.
type Step struct {
	Name   string    `json:"name"`
	State  string    `json:"state"`
	Detail string    `json:"detail,omitempty"`
	At     time.Time `json:"at"`
	// BytesDone and BytesTotal are the mirror step's progress, and
	// Connections how many connections its files come over now (not
	// stored: a job read back from the database fetches nothing).
	BytesDone   int64 `json:"bytes_done,omitempty"`
	BytesTotal  int64 `json:"bytes_total,omitempty"`
	Connections int   `json:"connections,omitempty"`
}

// Job is one model being served, and where it stands. Jobs are small: every
// event carries a whole one.
type Job struct {
	ID      string  `json:"id"`
	Kind    string  `json:"kind"`
	Request Request `json:"request"`
	State   string  `json:"state"`
	// Error is the sentence the job failed with.
	Error string `json:"error,omitempty"`
	// Model is the catalog name, once the plan has chosen it.
	Model string `json:"model,omitempty"`
	// Commit is the commit the registry resolved the revision to.
	Commit   string    `json:"commit,omitempty"`
	Steps    []Step    `json:"steps"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	// Reply is what the model said to the smoke test, and TokensPerSecond
	// how fast it said it.
	Reply           string  `json:"reply,omitempty"`
	TokensPerSecond float64 `json:"tokens_per_second,omitempty"`
	// RetryOf is the job this one retries.
	RetryOf string `json:"retry_of,omitempty"`
	// TraceID is the trace of the job's latest run (empty with tracing
	// off), and TraceSpan that run's root span: the next run, should the
	// job be resumed, links to it.
	TraceID   string `json:"trace_id,omitempty"`
	TraceSpan string `json:"-"`
	// Added is whether the job put Model's entry in the catalog, the name
	// not being there before: what a job that ends without serving it
	// takes out again (Server.undo), and nothing more.
	Added bool `json:"-"`
	// back is what the job's in-place trial changed of its model and has
	// not yet kept: the job's end (undo) takes it back (inplace.go).
	back takeBack
}

// Ended is whether the job has stopped for good.
func (j Job) Ended() bool { return j.State != Running }

// Refused is whether the job was refused as it asked: a serve that failed
// at its plan step, before a byte was fetched (no file matches, none fits
// the pool at its context, no node could ever host it, original weights
// with no vLLM). The same request fails the same way again, so it is not
// retried. A failure at another step may not happen twice: the registry
// or the mirror was away, the engine was missing and has been installed,
// there was no room. An update's plan step can fail for want of room
// beside its model, which an operator can make.
func (j Job) Refused() bool {
	if j.State != Failed || j.Request.CanaryOf != "" {
		return false
	}
	for _, st := range j.Steps {
		if st.State == Failed {
			return st.Name == StepPlan
		}
	}
	return false
}

// RolledBack is whether j is a trial its verdict rolled back, by its eval,
// its share of the requests or an operator's hand, and the step that
// decided it: not a failure to mend, and not retried, as the same version
// would be judged the same.
func (j Job) RolledBack() (Step, bool) {
	if j.State != Failed || j.Request.CanaryOf == "" {
		return Step{}, false
	}
	verdict, ok := j.Step(StepVerdict)
	if !ok || verdict.State != RolledBack {
		return Step{}, false
	}
	for _, st := range j.Steps {
		if st.State == RolledBack {
			return st, true
		}
	}
	return verdict, true
}

// EndStep is the name of the step a job ended at, as its page and the
// jobs list both say it: the one that decided a roll-back, the first
// failed (a cancel marks the one it stopped), else the last it reached;
// "" for a job with no step yet.
func (j Job) EndStep() string {
	if st, ok := j.RolledBack(); ok {
		return st.Name
	}
	for _, st := range j.Steps {
		if st.State == Failed {
			return st.Name
		}
	}
	if len(j.Steps) == 0 {
		return ""
	}
	return j.Steps[len(j.Steps)-1].Name
}

// Step returns the job's step of that name, if it reached it.
func (j Job) Step(name string) (Step, bool) {
	i := slices.IndexFunc(j.Steps, func(s Step) bool { return s.Name == name })
	if i < 0 {
		return Step{}, false
	}
	return j.Steps[i], true
}

func (j Job) clone() Job {
	j.Steps = slices.Clone(j.Steps)
	j.Request.Aliases = slices.Clone(j.Request.Aliases)
	if j.Request.Env != nil {
		env := make(map[string]string, len(j.Request.Env))
		for k, v := range j.Request.Env {
			env[k] = v
		}
		j.Request.Env = env
	}
	return j
}

// newID makes a job id that sorts by when it started and cannot be guessed
// from another: "<kind>-<unix seconds>-<8 random bytes in hex>".
func newID(kind string, now time.Time) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on the systems Go supports.
		panic(err)
	}
	return fmt.Sprintf("%s-%d-%s", kind, now.Unix(), hex.EncodeToString(b[:]))
}

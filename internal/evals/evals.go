// Package evals keeps, for each catalog model, a suite of cases the model
// must answer well, runs the suite through the gateway against the model
// (or, later, a new version of it served beside it under a hidden name),
// and keeps every run's results, so that two runs can be set side by side.
//
// Whether new weights answer as well as the old ones was a question asked
// by hand in the playground, differently each time, and answered by
// whoever looked. Replacing a model's weights needs the same questions
// asked of both versions the same way (temperature 0, a fixed seed), and
// the answers judged by a rule written down beforehand: a pattern, a JSON
// Schema, an exact string, or for an embedding model which of two texts
// lies nearer a third. A suite is checked whole before it is kept, and
// every refusal names the case and the field; a run records each case's
// answer, verdict, reason and latency, and the commit the target ran, so
// the pass rates of two versions compare.
//
// The package knows nothing of versions or canaries: a run names the
// model whose suite it runs and the target it asks (a catalog name), and
// whoever promotes a version compares the runs.
package evals

import (
	"time"
)

// The states of a run. A run is StateRunning while its cases are asked;
// it ends StateDone once every case has a verdict (however many failed),
// or StateFailed when it could not finish: stopped, or modelserve stopped
// under it.
const (
	StateRunning = "running"
	StateDone    = "done"
	StateFailed  = "failed"
)

// Run is one run of a model's suite against a target.
type Run struct {
	ID int64 `json:"id"`
	// Model is whose suite ran; Target the catalog name the requests
	// named (the model itself, or a version served beside it), and Commit
	// the commit the target ran (its origin's revision; empty for a model
	// added without one).
	Model  string `json:"model"`
	Target string `json:"target"`
	Commit string `json:"commit"`
	// Suite is the digest of the suite that ran: two runs with the same
	// digest asked the same cases the same way.
	Suite    string    `json:"suite"`
	State    string    `json:"state"`
	Error    string    `json:"error,omitempty"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	// Passed of Total cases passed; while the run runs, Results holds the
	// cases asked so far.
	Passed  int      `json:"passed"`
	Total   int      `json:"total"`
	Results []Result `json:"results,omitempty"`
}

// PassRate is the share of the suite's cases that passed, 0 to 1; 0 for a
// run of no cases.
func (r Run) PassRate() float64 {
	if r.Total == 0 {
		return 0
	}
	return float64(r.Passed) / float64(r.Total)
}

// Result is one case's verdict in a run.
type Result struct {
	Case string `json:"case"`
	// Kind is the case's expectation: regex, json_schema, exact or
	// similarity.
	Kind string `json:"kind"`
	Pass bool   `json:"pass"`
	// Answer is what the target answered, cut to MaxAnswer characters;
	// for a similarity case, the two cosines.
	Answer string `json:"answer"`
	// Reason says why a case failed, in a sentence.
	Reason  string `json:"reason,omitempty"`
	Latency int64  `json:"latency_ms"`
}

// MaxAnswer is how much of an answer a result keeps, in characters: enough
// to see what went wrong, not a transcript.
const MaxAnswer = 500

// Stored is a model's suite as kept: what PUT sent (checked, and written
// out again in one layout), who sent it and when. A model without a suite
// has no cases and a zero UpdatedAt.
type Stored struct {
	Model     string    `json:"model"`
	Suite     Suite     `json:"suite"`
	Digest    string    `json:"digest,omitempty"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	UpdatedBy string    `json:"updated_by,omitempty"`

	// text is the suite as kept (Suite.JSON), when it was read from the
	// store.
	text string
}

// SuiteJSON is the suite written out as the editor shows it and the store
// keeps it: Suite.JSON, without writing a kept suite out again.
func (s Stored) SuiteJSON() []byte {
	if s.text != "" {
		return []byte(s.text)
	}
	return s.Suite.JSON()
}

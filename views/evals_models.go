package views

// EvalsPage is a model's eval suite: the suite in an editor, a Run now
// button, and the newest runs side by side.
type EvalsPage struct {
	Layout Layout
	Model  string
	// Embeddings is whether the model embeds rather than chats: its cases
	// are similarity cases.
	Embeddings bool
	// Notice says what was just done ("Saved."); RunError why Run now was
	// refused.
	Notice, RunError string
	Form             EvalsForm
	// AddCase is the form that adds one case to the kept suite.
	AddCase AddCaseForm
	// RunURL is the Run now form's action, "" when there is no suite to
	// run.
	RunURL string
	Runs   EvalRuns
}

// EvalsForm is the suite's editor: a textarea holding the suite's JSON.
type EvalsForm struct {
	Action, CSRF string
	// Suite is the editor's text: the suite as kept, or what was sent
	// and refused.
	Suite string
	// Placeholder is an example suite for an empty editor.
	Placeholder string
	// Summary says what is kept ("3 cases, saved by ada at 10:04:05
	// UTC"), or that there is no suite.
	Summary string
	// Error is why the suite sent was refused, naming the case and field.
	Error string
}

// EvalRuns are a model's newest runs side by side: one column per run,
// oldest first, and one row per case.
type EvalRuns struct {
	// Poll is where the table is fetched again every second while a run
	// shown is running; "" when none is.
	Poll  string
	Runs  []EvalRunHead
	Cases []EvalCaseRow
}

// EvalRunHead is a run's column heading.
type EvalRunHead struct {
	ID     string
	Target string
	// Commit is the target's commit, short, and CommitFull whole; both
	// "" for a model added without an origin.
	Commit, CommitFull string
	State              State
	// Score is "2 of 3 passed".
	Score               string
	Started, StartedISO string
	// Error is why a failed run failed.
	Error string
}

// EvalCaseRow is one case across the runs shown.
type EvalCaseRow struct {
	Name, Kind string
	// Gone is a case that is not in the suite now, only in older runs.
	Gone  bool
	Cells []EvalCell
}

// EvalCell is one case's result in one run.
type EvalCell struct {
	// Mark is "pass" or "fail", or "" where the run has no result for the
	// case; Missing then says why ("not in this run", "not asked yet").
	Mark, Missing string
	// Reason is why it failed; Answer what the model answered (cut);
	// Latency how long it took ("340 ms").
	Reason, Answer, Latency string
}

// AddCaseForm adds one case to a model's kept suite, field by field: its
// name, what it asks, and what the answer is held to. A case refused comes
// back in it with the sentence why and what was typed.
type AddCaseForm struct {
	Action, CSRF string
	// Embeddings: the model embeds, and its cases are similarity cases.
	Embeddings bool
	Name       string
	// Kind is the expectation: regex, exact, json_schema or similarity
	// (evals.Kind*).
	Kind           string
	System, Prompt string
	MaxTokens      string
	// Expect is the pattern, the exact text or the schema, by Kind;
	// IgnoreCase is an exact text's.
	Expect     string
	IgnoreCase bool
	// Anchor, Closer and Farther are a similarity case's texts.
	Anchor, Closer, Farther string
	Error                   string
}

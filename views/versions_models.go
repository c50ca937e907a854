package views

// VersionsPage is a model's version history: each set of weights it has
// run or tried, newest first, with what was measured of it.
type VersionsPage struct {
	Layout Layout
	Model  string
	// Notice says what was just done ("" for nothing).
	Notice   string
	Versions []VersionRow
	// TrialURL is the job trying or restoring a version now, "" for none:
	// no version is restored while one runs.
	TrialURL string
	CSRF     string
}

// VersionRow is one version of a model, in words.
type VersionRow struct {
	ID             string
	Commit, Short  string
	Ref            string
	State          State
	Served         string
	ServedISO      string
	Ended          string
	Reason         string
	TokensPerSec   string
	MeasuredJobURL string
	Memory         string
	Eval           string
	EvalURL        string
	// RestoreURL is the form that serves the version again, "" for the
	// version serving now, one on trial, or while a job runs.
	RestoreURL string
}

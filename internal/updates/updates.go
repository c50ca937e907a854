// Package updates notices when a served model's repository gets new
// weights: for each catalog model served from a branch, it asks the
// registry now and then where the branch is, and records an update when
// the branch has moved to a commit whose files the model uses differ from
// those it runs.
//
// A model's origin says which commit its files came from, and nothing
// told anyone when its repository moved on: a fixed quantisation or a
// re-upload went unnoticed until someone looked. A branch also moves for
// commits that touch nothing the model uses (a README, another
// quantisation), and those must not read as news. Here a check compares
// the files themselves, by size and sha256, records what changed once (the
// same move noticed again, after a restart too, is the same update), and
// keeps the last check's result, a failure included, in a sentence.
//
// Acting on an update (serving the new commit, trying it beside the old
// one) is for later; an update's state leaves room for it.
package updates

import (
	"fmt"
	"time"

	"modelserve/catalog"
	"modelserve/internal/hf"
	"modelserve/internal/operr"
)

// Update is one move of a model's branch to new weights.
type Update struct {
	ID    int64  `json:"id"`
	Model string `json:"model"`
	Repo  string `json:"repo"`
	Ref   string `json:"ref"`
	// OldCommit is the commit the model ran when the update was noticed;
	// NewCommit where its branch had moved.
	OldCommit string       `json:"old_commit"`
	NewCommit string       `json:"new_commit"`
	Files     []FileChange `json:"files"`
	NoticedAt time.Time    `json:"noticed_at"`
	State     string       `json:"state"`
}

// FileChange is one file the model uses that differs at the new commit.
type FileChange struct {
	Path      string `json:"path"`
	OldBytes  int64  `json:"old_bytes"`
	OldSHA256 string `json:"old_sha256,omitempty"`
	// NewBytes and NewSHA256 are the file at the new commit; Gone says
	// the new commit has no such file.
	NewBytes  int64  `json:"new_bytes"`
	NewSHA256 string `json:"new_sha256,omitempty"`
	Gone      bool   `json:"gone,omitempty"`
}

// The states of an update. Only StateAvailable is written yet; the others
// are for acting on one.
const (
	StateAvailable  = "available"
	StateRunning    = "running"
	StatePromoted   = "promoted"
	StateRolledBack = "rolled_back"
	StateDismissed  = "dismissed"
)

// What is done with a model's updates: waiting for an operator to try one,
// or trying it as soon as it is noticed (its trial then promotes or rolls
// it back without anyone's hand).
const (
	PolicyManual = "manual"
	PolicyAuto   = "auto"
)

// The results of a check.
const (
	ResultUpToDate        = "up_to_date"
	ResultUpdateAvailable = "update_available"
	ResultFailed          = "failed"
)

// Check is what one check of a model found.
type Check struct {
	At     time.Time `json:"at"`
	Result string    `json:"result"`
	// Commit is the branch's head the check found; empty when it failed
	// before reading it.
	Commit string `json:"commit,omitempty"`
	// Error is why a failed check failed, in a sentence.
	Error string `json:"error,omitempty"`
	// UpdateID is the update the check found, when it found one.
	UpdateID int64 `json:"update_id,omitempty"`
}

// Result is what a check asked for now answers.
type Result struct {
	Model string `json:"model"`
	Check
	// Update is the update the check found, and Recorded whether this
	// check recorded it (false: an earlier check had).
	Update   *Update `json:"update,omitempty"`
	Recorded bool    `json:"recorded"`
}

// Status is what the watcher knows of one model.
type Status struct {
	Model string `json:"model"`
	Repo  string `json:"repo,omitempty"`
	Ref   string `json:"ref,omitempty"`
	// Commit is the commit the model runs.
	Commit string `json:"commit,omitempty"`
	// Watched is whether the model is checked at all; NotWatched says why
	// not (no origin, served before the branch was recorded, pinned).
	Watched    bool   `json:"watched"`
	NotWatched string `json:"not_watched,omitempty"`
	// Interval is the time between two checks ("6h0m0s"; "0s" never), the
	// server's default unless IntervalSet.
	Interval    string `json:"interval"`
	IntervalSet bool   `json:"interval_set"`
	// Policy is what is done with an update noticed: PolicyManual waits
	// for an operator, PolicyAuto tries it at once.
	Policy string `json:"policy"`
	// InPlace is whether an update with no room beside the model may
	// replace its replica in place, the model's requests waiting while it
	// reloads; when false such an update is refused.
	InPlace bool `json:"in_place"`
	// LastCheck is the last check of the commit the model runs now;
	// NextCheck when the next is due, zero when none is.
	LastCheck *Check    `json:"last_check,omitempty"`
	NextCheck time.Time `json:"next_check,omitzero"`
	// Available is the newest update from the commit the model runs,
	// nil when there is none.
	Available *Update `json:"available,omitempty"`

	interval time.Duration
}

// Bounds of an interval an operator sets: a check every minute is as often
// as a registry should be asked, and a year as rarely as still means
// something.
const (
	minInterval = time.Minute
	maxInterval = 365 * 24 * time.Hour
)

// ParseInterval reads an interval between checks as an operator writes it
// ("6h", "30m"; "0" for never), for the serve flag and the API alike.
func ParseInterval(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, operr.New(operr.Invalid, "the interval between checks is a duration such as 6h or 30m, or 0 for never, not %s", operr.Quote(s))
	}
	if err := checkInterval(d); err != nil {
		return 0, err
	}
	return d, nil
}

// checkInterval refuses an interval outside the bounds.
func checkInterval(d time.Duration) error {
	if d != 0 && (d < minInterval || d > maxInterval) {
		return operr.New(operr.Invalid, "the interval between checks is 0 (never), or from 1m to 8760h (a year), not %s", d)
	}
	return nil
}

// notWatched is why the watcher does not check m, "" when it does. Only a
// model served from a branch is checked: a commit, a tag or any other ref
// names one set of files for good (a tag can be moved by hand on the Hub,
// and that is a release's choice, not new weights to notice), so a rule of
// "branches as the registry listed them when the model was served" needs
// no question to the registry for a pinned model.
func notWatched(m catalog.Model) string {
	o := m.Origin
	switch {
	case m.Canary != nil:
		return fmt.Sprintf("%s is a new version of %s on trial: %s is the one watched", m.Name, m.Canary.Of, m.Canary.Of)
	case o == nil || o.Repo == "":
		return fmt.Sprintf("%s was added without a repository it came from: there is nothing to watch", m.Name)
	case o.Ref == "":
		return fmt.Sprintf("%s was served before modelserve recorded the branch it came from: %s", m.Name, serveAgain(m))
	case o.RefKind == "":
		return fmt.Sprintf("%s was served from %s, and the registry would not say then whether that is a branch: %s", m.Name, o.Ref, serveAgain(m))
	case hf.IsCommit(o.Ref) || o.RefKind == hf.RefCommit:
		return fmt.Sprintf("%s is pinned to the commit %s and is never updated: %s", m.Name, hf.Short(o.Ref), serveAgain(m))
	case o.RefKind == hf.RefTag:
		return fmt.Sprintf("%s is pinned to the tag %s and is never updated: %s", m.Name, o.Ref, serveAgain(m))
	case o.RefKind != hf.RefBranch:
		return fmt.Sprintf("%s is pinned to %s, which is not a branch, and is never updated: %s", m.Name, o.Ref, serveAgain(m))
	}
	return ""
}

// serveAgain is the remedy for a model not watched for want of a branch:
// served again from one. Its name is taken while it is in the catalog (a
// serve under it is refused), so the new one is served under another
// name, or it is removed first.
func serveAgain(m catalog.Model) string {
	return fmt.Sprintf("to have it watched for new weights, serve %s from a branch (revision main) under another name, "+
		"or remove %s from the catalog and serve it from one as %s again", m.Origin.Repo, m.Name, m.Name)
}

// changed are the files the model uses (used) that differ in now: by size,
// by sha256 where both sides have one (a small file kept in git has none,
// and is compared by size alone), or gone.
func changed(used []catalog.OriginFile, now []hf.File) []FileChange {
	at := make(map[string]hf.File, len(now))
	for _, f := range now {
		at[f.Path] = f
	}
	var out []FileChange
	for _, u := range used {
		c := FileChange{Path: u.Path, OldBytes: u.Bytes, OldSHA256: u.SHA256}
		f, ok := at[u.Path]
		switch {
		case !ok:
			c.Gone = true
		case f.Size != u.Bytes || (f.SHA256 != "" && u.SHA256 != "" && f.SHA256 != u.SHA256):
			c.NewBytes, c.NewSHA256 = f.Size, f.SHA256
		default:
			continue
		}
		out = append(out, c)
	}
	return out
}

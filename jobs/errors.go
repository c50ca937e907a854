package jobs

import (
	"errors"

	"modelserve/internal/operr"
	"modelserve/internal/store"
)

var (
	// ErrNotFound is a job id the server has no job for.
	ErrNotFound = errors.New("no such job")
	// ErrConflict is an action the job's state does not allow: cancelling
	// a job that has ended, retrying one that has not failed.
	ErrConflict = errors.New("the job is not in a state for that")
	// ErrClosed is a job started while the server shuts down.
	ErrClosed = errors.New("the job server is shutting down")
)

// sentencef is a step's failure the operator can act on: no file fits,
// the checksum does not match, the engine cannot run it.
func sentencef(format string, args ...any) error {
	return operr.New(operr.Refused, format, args...)
}

func notFound(id string) error {
	return operr.Wrap(operr.NotFound, ErrNotFound, "there is no job %s: the list of jobs has the ids there are", operr.Quote(id))
}

// stepError is a step's failure: which step, and why.
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.step + ": " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

// rolledBack is a trial's ending by its verdict (its evals, its share of
// the requests, an operator): the job ends failed, as any trial not
// promoted does, but its verdict reads RolledBack rather than failed, so
// the job is not shown as broken nor offered a retry that would be
// judged the same (Job.RolledBack).
type rolledBack struct{ err error }

func (e *rolledBack) Error() string { return e.err.Error() }
func (e *rolledBack) Unwrap() error { return e.err }

func failedAt(step string, err error) error {
	if err == nil {
		return nil
	}
	return &stepError{step: step, err: err}
}

// diskFull is err, or, when err is the database failing on a full disk,
// the operator's sentence for it (store.FullError).
func diskFull(err error, what string) error { return store.FullError(err, what) }

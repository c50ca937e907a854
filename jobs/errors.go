package jobs

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"modelserve/catalog"
	"modelserve/internal/hf"
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

// sentence is an error whose message is meant for the operator, as it is.
// kind, when set, is the sentinel errors.Is matches; err is a cause kept
// for errors.As.
type sentence struct {
	msg  string
	kind error
	err  error
}

func (e *sentence) Error() string { return e.msg }

func (e *sentence) Unwrap() []error {
	var out []error
	if e.kind != nil {
		out = append(out, e.kind)
	}
	if e.err != nil {
		out = append(out, e.err)
	}
	return out
}

// HTTPStatus is the status the API answers the sentence with.
func (e *sentence) HTTPStatus() int {
	switch {
	case errors.Is(e.kind, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(e.kind, ErrConflict):
		return http.StatusConflict
	case errors.Is(e.kind, ErrClosed):
		return http.StatusServiceUnavailable
	}
	return http.StatusBadRequest
}

// HTTPStatus is 400: the request said something that cannot be served.
func (e *InvalidError) HTTPStatus() int { return http.StatusBadRequest }

func sentencef(format string, args ...any) error {
	return &sentence{msg: fmt.Sprintf(format, args...)}
}

func notFound(id string) error {
	return &sentence{msg: fmt.Sprintf("there is no job %q: the list of jobs has the ids there are", id), kind: ErrNotFound}
}

// said marks an error from a dependency whose message was written for the
// operator: the registry's (hf writes every refusal as a sentence naming
// the repository and what to do) and the mirror's.
func said(err error) error {
	if err == nil || isCancel(err) {
		return err
	}
	var s *sentence
	if errors.As(err, &s) {
		return err
	}
	return &sentence{msg: err.Error(), err: err}
}

// shown is whether err's message may be shown to the operator as it is.
func shown(err error) bool {
	var s *sentence
	var inv *InvalidError
	switch {
	case errors.As(err, &s), errors.As(err, &inv):
		return true
	case errors.Is(err, catalog.ErrInvalid), errors.Is(err, catalog.ErrExists):
		return true
	case errors.Is(err, hf.ErrGated), errors.Is(err, hf.ErrNotFound), errors.Is(err, hf.ErrRevisionNotFound),
		errors.Is(err, hf.ErrUnauthorized), errors.Is(err, hf.ErrDisabled), errors.Is(err, hf.ErrUnavailable):
		return true
	}
	return false
}

func isCancel(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// stepError is a step's failure: which step, and why.
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.step + ": " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

func failedAt(step string, err error) error {
	if err == nil {
		return nil
	}
	return &stepError{step: step, err: err}
}

// Package operr is the one shape of an error an operator can act on: a
// kind, which says how an answer classifies it (the API's status code), and
// a sentence naming the thing, what is wrong and what to do, shown as it
// is. Every package returns its operator's errors as an *Error; the
// handlers map kinds to status codes in one place. Any other error is the
// program's: logged with its cause, and shown as a short generic message.
//
// Before it there were seven error types and four classifiers, each package
// with its own idea of which errors were sentences and what status each
// deserved; an error one classifier missed reached a page as "internal
// error", or a Go error string reached an operator.
package operr

import (
	"errors"
	"fmt"
	"strconv"

	"modelserve/internal/words"
)

// Kind is what sort of refusal an error is.
type Kind string

const (
	// Invalid: what was asked cannot be served as asked (400).
	Invalid Kind = "invalid"
	// NotFound: no such thing (404).
	NotFound Kind = "not found"
	// Conflict: the thing's state does not allow it now (409).
	Conflict Kind = "conflict"
	// Forbidden: the registry will not hand it over with this token (403).
	Forbidden Kind = "forbidden"
	// Refused: it exists and was understood, and cannot be done here: no
	// file fits, nothing for the engine to run (422).
	Refused Kind = "refused"
	// Unavailable: not now; try again later (503).
	Unavailable Kind = "unavailable"
	// Upstream: a service modelserve asks refused modelserve itself, such
	// as the registry refusing the configured token (502).
	Upstream Kind = "upstream"
)

// Error is an operator's error: Msg is the sentence, Err the cause kept
// for errors.Is and errors.As (a sentinel that tells cases apart, or the
// library's error, for the log).
type Error struct {
	Kind Kind
	Msg  string
	Err  error
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Err }

// New is an operator's error of kind saying the formatted sentence.
func New(kind Kind, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// Wrap is New keeping cause, which errors.Is and errors.As then find.
func Wrap(kind Kind, cause error, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...), Err: cause}
}

// As is the operator's error err is or wraps, and whether there is one.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// Sentence is what the operator is shown of err: the sentence of the
// operator's error it is or wraps, without whatever context was wrapped
// around it for the log (a path on this machine, a Go error's words); ok
// is false when err is not the operator's, and must be logged instead.
// Code that adds something an operator should read makes a new Error.
func Sentence(err error) (string, bool) {
	e, ok := As(err)
	if !ok {
		return "", false
	}
	return e.Msg, true
}

// Quote is user input quoted for a sentence, clipped as words.Clip clips
// it (the quote holds what is kept; how much was cut follows it): a
// sentence that echoed a megabyte of a request back would be no sentence.
func Quote(s string) string {
	head, cut := words.Cut(s)
	return strconv.Quote(head) + cut
}

package handlers

import (
	"net/http"

	"modelserve/internal/operr"
)

// operatorStatus is the status an operator's error (operr) is answered
// with, and false for any other error, which is logged and answered with a
// generic sentence. It is the one place kinds become status codes, for the
// API and the console alike.
func operatorStatus(err error) (int, bool) {
	e, ok := operr.As(err)
	if !ok {
		return 0, false
	}
	if status, ok := statusOf[e.Kind]; ok {
		return status, true
	}
	return http.StatusBadRequest, true
}

var statusOf = map[operr.Kind]int{
	operr.Invalid:     http.StatusBadRequest,
	operr.NotFound:    http.StatusNotFound,
	operr.Conflict:    http.StatusConflict,
	operr.Forbidden:   http.StatusForbidden,
	operr.Refused:     http.StatusUnprocessableEntity,
	operr.Unavailable: http.StatusServiceUnavailable,
	operr.Upstream:    http.StatusBadGateway,
}

// badRequest is the operator's error for a request that says something
// that cannot be taken as it is: 400, with the sentence.
func badRequest(msg string) error { return operr.New(operr.Invalid, "%s", msg) }

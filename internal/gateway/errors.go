package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"modelserve/internal/operr"
)

// apiError is an answer in OpenAI's error shape, which the OpenAI clients
// parse into their own error types: {"error": {"message", "type", "param",
// "code"}}.
type apiError struct {
	status  int
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
	// retryAfter, when set, is sent as Retry-After, which the clients
	// honour before they retry.
	retryAfter time.Duration
	// elsewhere says the request is to be sent again on a new connection,
	// which reaches another modelserve (handingOver): the connection is
	// closed after the answer, and the OpenAI clients are told to retry
	// whatever the status (x-should-retry), after retryAfter as their own
	// header gives it to the millisecond (retry-after-ms).
	elsewhere bool
}

func (e *apiError) Error() string { return e.Message }

func (e *apiError) write(w http.ResponseWriter) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((e.retryAfter+time.Second-1)/time.Second)))
	}
	if e.elsewhere {
		w.Header().Set("Connection", "close")
		w.Header().Set("x-should-retry", "true")
		w.Header().Set("retry-after-ms", strconv.FormatInt(e.retryAfter.Milliseconds(), 10))
	}
	if e.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="modelserve"`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	json.NewEncoder(w).Encode(struct {
		Error *apiError `json:"error"`
	}{e})
}

func invalidRequest(code, msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, Type: "invalid_request_error", Code: code, Message: msg}
}

func unauthorized(msg string) *apiError {
	return &apiError{status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key", Message: msg}
}

func modelNotFound(name string) *apiError {
	param := "model"
	return &apiError{status: http.StatusNotFound, Type: "invalid_request_error", Code: "model_not_found", Param: &param,
		Message: "the model " + operr.Quote(name) + " does not exist; GET /v1/models lists them"}
}

func modelRemoved(name string) *apiError {
	param := "model"
	return &apiError{status: http.StatusNotFound, Type: "invalid_request_error", Code: "model_not_found", Param: &param,
		Message: "the model " + operr.Quote(name) + " was removed from the catalog while the request waited for it; GET /v1/models lists those there are"}
}

func tooLarge(limit int64) *apiError {
	return &apiError{status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
		Message: "the request body is larger than " + strconv.FormatInt(limit>>20, 10) + " MiB: send a shorter one"}
}

func queueFull(model string, waiting int) *apiError {
	return &apiError{status: http.StatusTooManyRequests, Type: "rate_limit_exceeded", Code: "queue_full", retryAfter: time.Second,
		Message: model + " is busy: " + strconv.Itoa(waiting) + " requests are already waiting for its replicas; retry in a moment"}
}

// residencyFull is queueFull for a model whose room the fleet keeps for
// another model's residency for left more, as placement (the fleet's
// sentence) says: Retry-After is what is left of it, rounded up.
func residencyFull(model string, waiting int, placement string, left time.Duration) *apiError {
	msg := model + " waits for room another model keeps for its residency"
	if _, why, ok := strings.Cut(placement, "waiting: "); ok {
		msg = model + " waits for room: " + why
	}
	if waiting > 0 {
		msg += ", and " + strconv.Itoa(waiting) + " requests are already waiting for it"
	}
	return &apiError{status: http.StatusTooManyRequests, Type: "rate_limit_exceeded", Code: "queue_full", retryAfter: left,
		Message: msg + "; retry after " + strconv.Itoa(int((left+time.Second-1)/time.Second)) + "s"}
}

// handingOver is the answer to a request for model waiting, in a
// modelserve that has handed its port to a new one, for a replica that
// will not start here: 503, which the OpenAI clients retry, on a new
// connection, which the new modelserve takes.
func handingOver(model string) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, Type: "server_error", Code: "handing_over", retryAfter: handoverRetryAfter, elsewhere: true,
		Message: "modelserve handed its port to a new process while this request waited for a replica of " + model + " to start: send it again, and the new process starts one"}
}

// handoverRetryAfter is how long a client told handingOver waits before
// it sends again: the new process already serves, and the OpenAI clients
// take a wait of 0 as none given and back off for half a second instead.
const handoverRetryAfter = 100 * time.Millisecond

func unavailable(code, msg string) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, Type: "server_error", Code: code, Message: msg}
}

func badGateway(msg string) *apiError {
	return &apiError{status: http.StatusBadGateway, Type: "server_error", Code: "upstream_error", Message: msg}
}

func internal() *apiError {
	return &apiError{status: http.StatusInternalServerError, Type: "server_error", Code: "internal_error",
		Message: "modelserve could not do that; the server's log says why"}
}

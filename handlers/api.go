package handlers

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"modelserve/catalog"
	"modelserve/internal/auth"
)

// errorBody is every API error: one sentence the caller can act on.
type errorBody struct {
	Error string `json:"error"`
}

// apiError writes err for a script. An error the operator can act on (bad
// input, something not found) is shown as it is, with its status; any other
// is logged once with its cause and answered with a generic sentence, so no
// internal detail leaks into a response.
func (s *Server) apiError(w http.ResponseWriter, r *http.Request, err error) {
	if status, ok := operatorStatus(err); ok {
		writeJSON(w, status, errorBody{Error: err.Error()})
		return
	}
	s.deps.Log.Error("api request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	writeJSON(w, http.StatusInternalServerError, errorBody{Error: "modelserve could not do that; the server's log says why"})
}

// operatorStatus is the status of an error whose sentence is meant for the
// operator, and false for any other.
func operatorStatus(err error) (int, bool) {
	var he interface{ HTTPStatus() int }
	switch {
	case errors.As(err, &he):
		return he.HTTPStatus(), true
	case errors.Is(err, catalog.ErrNotFound):
		return http.StatusNotFound, true
	case errors.Is(err, catalog.ErrInvalid):
		return http.StatusBadRequest, true
	case errors.Is(err, catalog.ErrExists):
		return http.StatusConflict, true
	}
	return 0, false
}

// requireToken lets a request through with a valid bearer token, and
// answers anything else 401 with a sentence saying how to get one.
func (s *Server) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if !ok || tok == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="modelserve"`)
			writeJSON(w, http.StatusUnauthorized, errorBody{Error: "the API needs a token: send Authorization: Bearer <token>, " +
				"made with modelserve token create NAME"})
			return
		}
		if _, err := s.tokens.Check(r.Context(), strings.TrimSpace(tok)); err != nil {
			if !errors.Is(err, auth.ErrBadToken) {
				s.apiError(w, r, err)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="modelserve", error="invalid_token"`)
			writeJSON(w, http.StatusUnauthorized, errorBody{Error: err.Error() + ": make a new one with modelserve token create NAME"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// decodeJSON reads a request body of at most 1 MiB into v, refusing unknown
// fields: a misspelt field silently ignored would serve the wrong thing.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("the request body is not the JSON expected: " + err.Error())
	}
	return nil
}

// badRequest is an error whose sentence is the answer, with status 400.
type badRequest string

func (e badRequest) Error() string   { return string(e) }
func (e badRequest) HTTPStatus() int { return http.StatusBadRequest }

package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"modelserve/internal/accesslog"
	"modelserve/internal/auth"
	"modelserve/internal/operr"
	"modelserve/internal/store"
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
	err = store.FullError(err, "that could not be done")
	if status, ok := operatorStatus(err); ok {
		msg, _ := operr.Sentence(err)
		writeJSON(w, status, errorBody{Error: msg})
		return
	}
	s.deps.Log.Error("api request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	writeJSON(w, http.StatusInternalServerError, errorBody{Error: "modelserve could not do that; the server's log says why"})
}

// requireToken lets a request through with a valid bearer token, and
// answers anything else 401 with a sentence saying how to get one.
//
// The sentence names the data directory as a word, not where it is: it
// goes to anyone, and an answer never shows a path on this machine. The
// console, signed in, shows the command with the path (tokenCreate).
func (s *Server) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := auth.BearerToken(r.Header.Get("Authorization"))
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="modelserve"`)
			writeJSON(w, http.StatusUnauthorized, errorBody{Error: "the API needs a token: send Authorization: Bearer <token>, " +
				"made with " + noTokenCreate})
			return
		}
		who, err := s.tokens.Check(r.Context(), tok)
		if err != nil {
			if !errors.Is(err, auth.ErrBadToken) {
				s.apiError(w, r, err)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="modelserve", error="invalid_token"`)
			writeJSON(w, http.StatusUnauthorized, errorBody{Error: err.Error() + ": make a new one with " + noTokenCreate})
			return
		}
		accesslog.SetToken(r.Context(), who.Name)
		if !who.API() {
			writeJSON(w, http.StatusForbidden, errorBody{Error: "the token " + who.Name + " is for the gateway (/v1/) only: " +
				"use a token made without --scope gateway or --models for the API"})
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, who.Name)))
	})
}

type tokenKey struct{}

// tokenName is the name of the API token a request carried, for what is
// recorded of who did something ("" outside the API).
func tokenName(ctx context.Context) string {
	name, _ := ctx.Value(tokenKey{}).(string)
	return name
}

// decodeJSON reads a request body of at most 1 MiB, one JSON value, into
// v, refusing unknown fields: a misspelt field silently ignored would serve
// the wrong thing (api_json_body.go).
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("the request body is not the JSON expected: " + bodyProblem(err))
	}
	return oneValue(dec)
}

// writeJSON answers v as JSON with status: every API answer, and the
// health check's.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// noTokenCreate is how an unauthenticated caller is told to make a token.
const noTokenCreate = "modelserve token create --data DIR NAME, DIR being the server's data directory (its --data), " +
	"or on the console's Tokens page"

// Package handlers is modelserve's HTTP face: the console's pages, the JSON
// API under /api/v1/, the event streams, and what guards them.
//
// Every route is in the one table below, so what the server answers can be
// read in one place. Handlers load, validate, act and render; how a job runs
// is the jobs package's business, not theirs.
package handlers

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"
)

// Deps are what the handlers need. New refuses a missing one by name.
type Deps struct {
	DB  *sql.DB
	Log *slog.Logger
}

// Server holds the handlers' dependencies.
type Server struct {
	deps Deps
}

// New builds the route table.
func New(d Deps) (http.Handler, error) {
	if d.DB == nil {
		return nil, errors.New("handlers: Deps.DB is required")
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	s := &Server{deps: d}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	return mux, nil
}

// healthz answers 200 while the database answers, so a supervisor restarts a
// server whose state has gone away rather than one that is merely busy.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.deps.DB.PingContext(ctx); err != nil {
		s.deps.Log.Error("health check: database", "err", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "database unavailable"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

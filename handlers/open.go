package handlers

import (
	"context"
	"crypto/subtle"
	"net/http"
	"time"

	"modelserve/internal/auth"
)

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

// metricsGuard lets a scraper read /metrics: anyone, as scrapers expect,
// unless the operator gave a metrics token, which it then must send. The
// figures name every model served, which not every operator wants open.
func (s *Server) metricsGuard(next http.Handler) http.Handler {
	want := s.deps.MetricsToken
	if want == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := auth.BearerToken(r.Header.Get("Authorization"))
		if !ok || subtle.ConstantTimeCompare([]byte(tok), []byte(want)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="modelserve-metrics"`)
			http.Error(w, "/metrics needs the metrics token the server was started with (--metrics-token): send Authorization: Bearer <token>", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

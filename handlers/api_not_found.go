package handlers

import (
	"net/http"
	"strings"

	"modelserve/internal/operr"
)

// apiNotFound answers what no API route takes. The catch-all pattern
// matches every method, so the mux's own 405 never happens under /api/v1/:
// it asks the mux which methods the path has, and answers 405 with Allow
// when it has some, so a script that used the wrong method is told so
// rather than that the route does not exist.
func (s *Server) apiNotFound(api *http.ServeMux) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if allow := allowedMethods(api, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: operr.Quote(r.URL.Path) + " takes " +
				strings.Join(allow, " or ") + ", not " + r.Method})
			return
		}
		writeJSON(w, http.StatusNotFound, errorBody{Error: "no API route " + operr.Quote(r.Method+" "+r.URL.Path) + "; the README lists them"})
	}
}

// allowedMethods are the methods mux has a route other than its catch-all
// for at r's path, in the order HTTP lists them.
func allowedMethods(mux *http.ServeMux, r *http.Request) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != "/api/v1/" {
			allow = append(allow, m)
		}
	}
	return allow
}

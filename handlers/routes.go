package handlers

import (
	"net/http"

	"modelserve/internal/accesslog"
	"modelserve/static"
)

// routes is every route the server answers, in one table of three rooms
// and what stands outside them:
//
//   - openRoutes: the health check, the favicon and /metrics, for
//     supervisors and scrapers, which carry no session;
//   - apiRoutes: the JSON API under /api/v1/, for scripts, behind a bearer
//     token checked once for the whole room (api_*.go);
//   - gatewayRoutes: the OpenAI-compatible API of the served models, and
//     the mirror's files for nodes, each behind a token too;
//   - consoleRoutes: the console's pages and the actions of its forms, for
//     people, each behind the session (page_*.go);
//   - streamRoutes: the console's event streams, which keep its pages live,
//     behind the same session (stream_*.go).
//
// Go's mux picks the most specific pattern whatever the order, so the
// rooms can be read apart: a route's room is where it is written.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	s.openRoutes(mux)
	s.apiRoutes(mux)
	s.gatewayRoutes(mux)
	s.consoleRoutes(mux)
	s.streamRoutes(mux)
	// A line per request in the log, inside fromProxy so that it names
	// the client rather than the proxy.
	return s.fromProxy(accesslog.Handler(s.deps.Log, mux))
}

// openRoutes are open to anyone: supervisors and scrapers carry no
// credentials.
func (s *Server) openRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", s.healthz)
	// Browsers ask for it on every page; nothing rather than a 404 each time.
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	if s.deps.Metrics != nil {
		mux.Handle("GET /metrics", s.metricsGuard(s.deps.Metrics))
	}
}

// apiRoutes are the JSON API, for scripts: a mux of its own, behind one
// bearer-token check (requireToken), with its own answer for what no route
// takes (apiNotFound).
func (s *Server) apiRoutes(mux *http.ServeMux) {
	api := http.NewServeMux()
	api.HandleFunc("POST /api/v1/serve", s.apiServe)
	api.HandleFunc("GET /api/v1/jobs", s.apiJobList)
	api.HandleFunc("GET /api/v1/jobs/{id}", s.apiJobShow)
	api.HandleFunc("GET /api/v1/jobs/{id}/events", s.apiJobEvents)
	api.HandleFunc("POST /api/v1/jobs/{id}/cancel", s.apiJobCancel)
	api.HandleFunc("POST /api/v1/jobs/{id}/retry", s.apiJobRetry)
	api.HandleFunc("GET /api/v1/catalog", s.apiCatalogList)
	api.HandleFunc("GET /api/v1/catalog/{name}", s.apiCatalogShow)
	api.HandleFunc("DELETE /api/v1/catalog/{name}", s.apiCatalogRemove)
	api.HandleFunc("GET /api/v1/mirror", s.apiMirrorList)
	api.HandleFunc("GET /api/v1/repos/{owner}/{name}", s.apiRepo)
	api.HandleFunc("GET /api/v1/nodes", s.apiNodes)
	api.HandleFunc("GET /api/v1/nodes/{name}/series", s.apiNodeSeries)
	api.HandleFunc("GET /api/v1/replicas", s.apiReplicas)
	api.HandleFunc("GET /api/v1/replicas/{id}/log", s.apiReplicaLog)
	api.HandleFunc("POST /api/v1/replicas/{id}/stop", s.apiReplicaControl("stop"))
	api.HandleFunc("POST /api/v1/replicas/{id}/restart", s.apiReplicaControl("restart"))
	api.HandleFunc("POST /api/v1/catalog/{name}/scale", s.apiModelScale)
	api.HandleFunc("POST /api/v1/catalog/{name}/unpark", s.apiModelUnpark)
	api.HandleFunc("POST /api/v1/catalog/{name}/check", s.apiModelCheck)
	api.HandleFunc("GET /api/v1/catalog/{name}/versions", s.apiModelVersions)
	api.HandleFunc("GET /api/v1/catalog/{name}/series", s.apiModelSeries)
	api.HandleFunc("POST /api/v1/catalog/{name}/versions/{id}/restore", s.apiVersionRestore)
	api.HandleFunc("POST /api/v1/catalog/{name}/update", s.apiModelUpdate)
	api.HandleFunc("POST /api/v1/catalog/{name}/promote", s.apiModelPromote)
	api.HandleFunc("POST /api/v1/catalog/{name}/rollback", s.apiModelRollBack)
	api.HandleFunc("GET /api/v1/catalog/{name}/updates", s.apiModelUpdates)
	api.HandleFunc("PUT /api/v1/catalog/{name}/updates", s.apiModelUpdatesSet)
	api.HandleFunc("GET /api/v1/updates", s.apiUpdateList)
	api.HandleFunc("GET /api/v1/updates/{id}", s.apiUpdateShow)
	api.HandleFunc("GET /api/v1/catalog/{name}/evals", s.apiEvalsShow)
	api.HandleFunc("PUT /api/v1/catalog/{name}/evals", s.apiEvalsSet)
	api.HandleFunc("POST /api/v1/catalog/{name}/evals/run", s.apiEvalsRun)
	api.HandleFunc("GET /api/v1/evals/runs/{id}", s.apiEvalRunShow)
	api.Handle("/api/v1/", s.apiNotFound(api))
	mux.Handle("/api/v1/", s.requireToken(api))
}

// gatewayRoutes are what other programs fetch and call: the served models
// and the mirror's files.
func (s *Server) gatewayRoutes(mux *http.ServeMux) {
	// The gateway, for OpenAI clients: the served models by name, behind
	// the same API tokens (internal/gateway). Any other POST /v1/ whose
	// body names a model goes to the gateway too, which passes on the
	// engine's routes it knows (responses, messages, ...) and refuses the
	// rest.
	if g := s.deps.Gateway; g != nil {
		mux.HandleFunc("GET /v1/models", g.ListModels)
		mux.HandleFunc("GET /v1/models/{model}", g.ShowModel)
		mux.HandleFunc("POST /v1/chat/completions", g.Forward)
		mux.HandleFunc("POST /v1/completions", g.Forward)
		mux.HandleFunc("POST /v1/embeddings", g.Forward)
		mux.HandleFunc("POST /v1/rerank", g.Forward)
		mux.HandleFunc("POST /v1/", g.Forward)
		mux.HandleFunc("/v1/", g.NotFound)
	}

	// The mirror's files, for nodes fetching weights (Range, conditional).
	// Behind a token like the API: the files may be a gated repository's,
	// which the registry gives only to accounts with access.
	mux.Handle("GET /mirror/", s.requireToken(s.deps.Mirror.Handler()))
}

// consoleRoutes are the console's pages and the actions of its forms, for
// people. Every one is registered through signedIn or anyone, which read
// the session, send anyone not signed in to the sign-in page (signedIn
// only) and check the CSRF token of every request that changes something:
// no console route can be added without them. The stylesheets and scripts
// are open, as the sign-in page needs them.
func (s *Server) consoleRoutes(mux *http.ServeMux) {
	mux.Handle("GET /static/", static.Handler())

	anyone := s.room(mux, false)
	anyone("GET /login", s.loginPage)
	anyone("POST /login", s.loginSubmit)

	signedIn := s.room(mux, true)
	signedIn("POST /logout", s.logout)

	signedIn("GET /{$}", s.home)
	signedIn("GET /serve", s.servePage)
	signedIn("GET /serve/report", s.serveReportFragment)
	signedIn("GET /serve/memory", s.serveMemory)
	signedIn("GET /serve/search", s.serveSearch)
	signedIn("POST /serve", s.serveSubmit)

	signedIn("GET /jobs", s.jobsPage)
	signedIn("GET /jobs/{id}", s.jobPage)
	signedIn("POST /jobs/{id}/cancel", s.jobCancel)
	signedIn("POST /jobs/{id}/retry", s.jobRetry)

	signedIn("GET /catalog", s.catalogPage)
	signedIn("POST /catalog/{name}/remove", s.catalogRemove)
	signedIn("GET /catalog/{name}/playground", s.playgroundPage)
	signedIn("POST /catalog/{name}/playground", s.playgroundSend)
	signedIn("POST /catalog/{name}/check", s.modelCheck)
	signedIn("POST /catalog/{name}/update", s.modelUpdate)
	signedIn("POST /catalog/{name}/promote", s.modelPromote)
	signedIn("POST /catalog/{name}/rollback", s.modelRollBack)
	signedIn("GET /catalog/{name}/versions", s.versionsPage)
	signedIn("POST /catalog/{name}/versions/{id}/restore", s.versionRestore)
	signedIn("GET /catalog/{name}/evals", s.evalsPage)
	signedIn("POST /catalog/{name}/evals", s.evalsSave)
	signedIn("POST /catalog/{name}/evals/cases", s.evalsAddCase)
	signedIn("POST /catalog/{name}/evals/run", s.evalsRun)
	signedIn("GET /updates/{id}", s.updatePage)

	// The page is /mirror; the files nodes fetch are below /mirror/.
	signedIn("GET /mirror", s.mirrorPage)
	signedIn("POST /mirror", s.mirrorRemove)

	signedIn("GET /fleet", s.fleetPage)
	signedIn("GET /fleet/replicas/{id}/log", s.replicaLogPage)
	signedIn("POST /fleet/replicas/{id}/stop", s.replicaControl("stop"))
	signedIn("POST /fleet/replicas/{id}/restart", s.replicaControl("restart"))
	signedIn("POST /fleet/models/{name}/scale", s.modelScale)
	signedIn("POST /fleet/models/{name}/unpark", s.modelUnpark)

	signedIn("GET /tokens", s.tokensPage)
	signedIn("POST /tokens", s.tokensSubmit)
	signedIn("POST /tokens/{name}/revoke", s.tokensRevoke)
}

// streamRoutes are the console's server-sent event streams, which keep its
// pages live: behind the session as the pages are, each next to the page
// it feeds in the path.
func (s *Server) streamRoutes(mux *http.ServeMux) {
	signedIn := s.room(mux, true)
	signedIn("GET /jobs/stream", s.jobsStream)
	signedIn("GET /jobs/{id}/stream", s.jobStream)
	signedIn("GET /catalog/{name}/playground/stream", s.playgroundStream)
	signedIn("GET /mirror/stream", s.mirrorStream)
	signedIn("GET /fleet/stream", s.fleetStream)
	signedIn("GET /catalog/stream", s.catalogStream)
}

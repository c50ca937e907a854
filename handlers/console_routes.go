package handlers

import (
	"net/http"

	"modelserve/static"
)

// consoleRoutes are the console's pages, each behind the session: signedIn
// sends anyone not signed in to the sign-in page and checks the CSRF token
// of every request that changes something; anyone does the same for the
// sign-in page itself. The stylesheets and scripts are open, as the
// sign-in page needs them.
func (s *Server) consoleRoutes(mux *http.ServeMux) {
	mux.Handle("GET /static/", static.Handler())

	mux.Handle("GET /login", s.anyone(s.loginPage))
	mux.Handle("POST /login", s.anyone(s.loginSubmit))
	mux.Handle("POST /logout", s.signedIn(s.logout))

	mux.Handle("GET /{$}", s.signedIn(s.home))
	mux.Handle("GET /serve", s.signedIn(s.servePage))
	mux.Handle("GET /serve/report", s.signedIn(s.serveReportFragment))
	mux.Handle("GET /serve/memory", s.signedIn(s.serveMemory))
	mux.Handle("GET /serve/search", s.signedIn(s.serveSearch))
	mux.Handle("POST /serve", s.signedIn(s.serveSubmit))

	mux.Handle("GET /jobs", s.signedIn(s.jobsPage))
	mux.Handle("GET /jobs/stream", s.signedIn(s.jobsStream))
	mux.Handle("GET /jobs/{id}", s.signedIn(s.jobPage))
	mux.Handle("GET /jobs/{id}/stream", s.signedIn(s.jobStream))
	mux.Handle("POST /jobs/{id}/cancel", s.signedIn(s.jobCancel))
	mux.Handle("POST /jobs/{id}/retry", s.signedIn(s.jobRetry))

	mux.Handle("GET /catalog", s.signedIn(s.catalogPage))
	mux.Handle("POST /catalog/{name}/remove", s.signedIn(s.catalogRemove))
	mux.Handle("GET /catalog/{name}/playground", s.signedIn(s.playgroundPage))
	mux.Handle("POST /catalog/{name}/playground", s.signedIn(s.playgroundSend))
	mux.Handle("GET /catalog/{name}/playground/stream", s.signedIn(s.playgroundStream))
	mux.Handle("POST /catalog/{name}/check", s.signedIn(s.modelCheck))
	mux.Handle("POST /catalog/{name}/update", s.signedIn(s.modelUpdate))
	mux.Handle("POST /catalog/{name}/promote", s.signedIn(s.modelPromote))
	mux.Handle("POST /catalog/{name}/rollback", s.signedIn(s.modelRollBack))
	mux.Handle("GET /catalog/{name}/evals", s.signedIn(s.evalsPage))
	mux.Handle("POST /catalog/{name}/evals", s.signedIn(s.evalsSave))
	mux.Handle("POST /catalog/{name}/evals/run", s.signedIn(s.evalsRun))
	mux.Handle("GET /updates/{id}", s.signedIn(s.updatePage))

	// The page is /mirror; the files nodes fetch are below /mirror/.
	mux.Handle("GET /mirror", s.signedIn(s.mirrorPage))
	mux.Handle("GET /mirror/stream", s.signedIn(s.mirrorStream))
	mux.Handle("POST /mirror", s.signedIn(s.mirrorRemove))

	mux.Handle("GET /fleet", s.signedIn(s.fleetPage))
	mux.Handle("GET /fleet/stream", s.signedIn(s.fleetStream))
	mux.Handle("GET /fleet/replicas/{id}/log", s.signedIn(s.replicaLogPage))
	mux.Handle("POST /fleet/replicas/{id}/stop", s.signedIn(s.replicaControl("stop")))
	mux.Handle("POST /fleet/replicas/{id}/restart", s.signedIn(s.replicaControl("restart")))
	mux.Handle("POST /fleet/models/{name}/scale", s.signedIn(s.modelScale))
	mux.Handle("POST /fleet/models/{name}/unpark", s.signedIn(s.modelUnpark))
}

// home is the jobs: what is happening, and the way to start more.
func (s *Server) home(w http.ResponseWriter, r *http.Request, v visit) {
	http.Redirect(w, r, "/jobs", http.StatusSeeOther)
}

// Package handlers is modelserve's HTTP face, in three rooms that share
// one route table (routes.go) and one floor:
//
//   - the JSON API under /api/v1/, for scripts (api_*.go): one mux of its
//     own behind one bearer-token check, its errors as {"error": ...}, and
//     its own floor in api.go (the token check, JSON in and out); a job's
//     events are the API's too, as a stream of JSON (api_job_events.go);
//   - the console's pages and the actions of their forms, for people
//     (page_*.go): each behind the session and the CSRF check, rendered
//     with the templ components of views;
//   - the event streams that keep the console's pages live (stream_*.go):
//     behind the same session, each rendering the component its page
//     swaps.
//
// Files without a prefix are the floor the rooms stand on: the server and
// what it needs (server.go), the routes open to anyone (open.go), the
// session, sign-in throttle and CSRF token (session*.go, csrf.go), the
// trusted proxies (proxy.go), the operator's errors as statuses
// (errors.go), rendering and formatting (render.go, format.go), and what
// more than one room reads (lookup.go, fleet_snapshot.go,
// fleet_control.go).
//
// Every route is in the one table, so what the server answers can be
// read in one place. Handlers load, validate, act and render; how a job
// runs is the jobs package's business, not theirs.
package handlers

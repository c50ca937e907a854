package handlers

import (
	"context"
	"net/http"
	"time"

	"modelserve/views"
)

// catalogEvery is how often the catalog page's stream looks: the replicas
// and requests it shows are in memory (the fleet, the gateway), and a
// rendering that did not change is not sent.
const catalogEvery = time.Second

// catalogReread is how often the stream reads the catalog, the watcher's
// statuses and the speeds again when the fleet did not say the models
// changed: a check that found an update, a model served without a fleet.
const catalogReread = 5 * time.Second

// catalogStream sends the catalog page's table as it changes, for the
// window the page shows (?after=, as the page's): replicas
// starting and stopping, requests, a model added or removed, an update
// noticed. What lives in the database is read again when the fleet's
// models or its ready replicas change, or every catalogReread.
func (s *Server) catalogStream(w http.ResponseWriter, r *http.Request, v visit) {
	var (
		read      catalogRead
		modelsKey = "\x00" // never a real key: the first look reads
		readyKey  string
		readAt    time.Time
	)
	after, err := catalogAfter(r)
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	base := s.publicBase(r)
	s.pollSections(w, r, catalogEvery, func(ctx context.Context, now time.Time) ([]part, bool) {
		var mk, rk string
		if s.deps.Fleet != nil {
			mk, rk = fleetKeys(s.deps.Fleet)
		}
		if mk != modelsKey || rk != readyKey || now.Sub(readAt) >= catalogReread {
			got, err := s.readCatalog(ctx, after, "")
			if err != nil {
				if ctx.Err() == nil {
					s.deps.Log.Error("reading the catalog for its page's stream", "err", err)
				}
				return nil, false // the browser reconnects and tries again
			}
			read, modelsKey, readyKey, readAt = got, mk, rk, now
		}
		p := s.catalogNow(read, base, now)
		p.Layout = views.Layout{CSRF: v.csrf}
		return []part{{"models", views.CatalogModels(p)}}, true
	})
}

package handlers

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"time"

	"modelserve/internal/fleet"
	"modelserve/views"
)

// fleetEvery is how often the fleet page's stream looks at the fleet. The
// fleet keeps its state in memory, so a look costs no I/O; a section goes
// out only when its rendering changed, so a quiet fleet sends nothing but
// the heartbeat.
const fleetEvery = time.Second

// fleetReread is how often the stream reads the catalog's scalings again
// when nothing in the fleet said they changed: another operator's scale
// that the fleet's figures do not show (a new maximum above what runs).
const fleetReread = 15 * time.Second

// fleetStream sends the fleet page's sections as they change: first all
// of them, then each one whose rendering differs from what was last sent.
// The catalog's scalings and the engine starts live in the database: they
// are read again only when the fleet's models or the replicas that became
// ready change, or every fleetReread, never at every look.
func (s *Server) fleetStream(w http.ResponseWriter, r *http.Request, v visit) {
	if s.deps.Fleet == nil {
		s.message(w, r, v, http.StatusNotFound, "No fleet", "this modelserve runs no fleet, so there is nothing to follow")
		return
	}
	var (
		figures   fleetFigures
		starts    []fleet.Start
		modelsKey string
		readyKey  string
		readAt    time.Time
	)
	s.pollSections(w, r, fleetEvery, func(ctx context.Context, now time.Time) ([]part, bool) {
		if mk, rk := fleetKeys(s.deps.Fleet); mk != modelsKey || rk != readyKey || now.Sub(readAt) >= fleetReread {
			figures, starts = s.fleetCatalog(ctx), s.recentStarts(ctx)
			modelsKey, readyKey, readAt = mk, rk, now
		}
		p := s.fleetView(now, v.csrf, figures, starts)
		return []part{
			{"nodes", views.FleetNodes(p)}, {"replicas", views.FleetReplicas(p)},
			{"models", views.FleetModels(p)}, {"swaps", views.FleetSwaps(p)}, {"starts", views.FleetStarts(p)},
		}, true
	})
}

// fleetKeys sum up what, when it changes, makes the catalog's scalings and
// the engine starts worth reading again: the models and what each wants,
// and the replicas that are ready.
func fleetKeys(f Fleet) (models, ready string) {
	var mb, rb []byte
	for _, h := range f.ModelHealth() {
		mb = append(mb, h.Model...)
		mb = strconv.AppendInt(append(mb, ' '), int64(h.Want), 10)
		mb = strconv.AppendBool(append(mb, ' '), h.Parked)
		mb = append(mb, '\n')
	}
	reps := f.Replicas()
	slices.SortFunc(reps, func(a, b fleet.Replica) int { return a.ReadyAt.Compare(b.ReadyAt) })
	for _, r := range reps {
		if !r.ReadyAt.IsZero() {
			rb = append(rb, r.ID...)
			rb = append(append(rb, ' '), r.ReadyAt.String()...)
			rb = append(rb, '\n')
		}
	}
	return string(mb), string(rb)
}

package handlers

import (
	"bytes"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/a-h/templ"

	"modelserve/catalog"
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

// section is one part of a page, swapped by the event of its name.
type section struct {
	name string
	data []byte
}

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
	ctx := r.Context()
	out := make(chan section)
	go func() {
		defer close(out)
		sent := map[string][]byte{}
		var (
			scalings  map[string]catalog.Scaling
			starts    []fleet.Start
			modelsKey string
			readyKey  string
			readAt    time.Time
		)
		tick := time.NewTicker(fleetEvery)
		defer tick.Stop()
		for {
			now := time.Now()
			if mk, rk := fleetKeys(s.deps.Fleet); mk != modelsKey || rk != readyKey || now.Sub(readAt) >= fleetReread {
				scalings, starts = s.scalings(ctx), s.recentStarts(ctx)
				modelsKey, readyKey, readAt = mk, rk, now
			}
			p := s.fleetView(now, v.csrf, scalings, starts)
			for _, sec := range []struct {
				name string
				c    func(views.FleetPage) templ.Component
			}{
				{"nodes", views.FleetNodes}, {"replicas", views.FleetReplicas},
				{"models", views.FleetModels}, {"starts", views.FleetStarts},
			} {
				data, err := renderString(ctx, sec.c(p))
				if err != nil {
					return
				}
				if bytes.Equal(sent[sec.name], data) {
					continue
				}
				select {
				case out <- section{sec.name, data}:
					sent[sec.name] = data
				case <-ctx.Done():
					return
				}
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	s.streamSections(w, r, out)
}

// streamSections streams each section sent on out as an event named
// after it, numbered in order, until the client goes. The producer ends
// with the request's context; what it was about to send is drained so it
// never waits on a reader that has gone.
func (s *Server) streamSections(w http.ResponseWriter, r *http.Request, out <-chan section) {
	var n uint64
	streamEach(s.events, w, r, out, func(sec section) ([]byte, string, string, error) {
		n++
		return sec.data, sec.name, strconv.FormatUint(n, 10), nil
	})
	for range out {
	}
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

// replicaLogPage is a replica's engine log: the last lines it wrote, on
// demand rather than on every look of the fleet page.
func (s *Server) replicaLogPage(w http.ResponseWriter, r *http.Request, v visit) {
	id := r.PathValue("id")
	rep, ok := s.replicaOf(id)
	if !ok {
		s.message(w, r, v, http.StatusNotFound, "No such replica",
			"the fleet has no replica named "+strconv.Quote(id)+": it may have stopped since; the fleet page lists those it has")
		return
	}
	now := time.Now()
	s.render(w, r, http.StatusOK, views.ReplicaLogPage(views.ReplicaLog{
		Layout: s.layout(v, "fleet", id+" · engine log"), ID: rep.ID, Lines: rep.Log, AsOf: timeText(now, now),
	}))
}

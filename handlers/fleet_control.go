package handlers

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"modelserve/internal/fleet"
)

// FleetControls are what an operator may do to the fleet's replicas and
// models (fleet.Fleet): stop or restart one replica, and start a parked
// model again once its cause is fixed.
type FleetControls interface {
	Stop(id string) error
	Restart(id string) error
	Unpark(ctx context.Context, model string) error
}

// Scaler changes how many replicas of a model run (catalog.Store, or the
// fleet.NotifyingCatalog around it, which has the fleet act at once).
type Scaler interface {
	SetScaling(ctx context.Context, name string, min, max int, idleAfter *time.Duration) error
}

// fleetDone is what the fleet page says after a control, by the word the
// control redirects with: the page builds the sentence, so a link cannot
// make it say anything else.
var fleetDone = map[string]string{
	"stop":    "%s is stopping. If its model still wants as many replicas, the fleet places a new one; scale the model down to run fewer.",
	"restart": "%s is restarting; the list below shows when it is ready again.",
	"scale":   "%s is scaled; the fleet starts or stops replicas to match.",
	"unpark":  "%s is unparked; the fleet starts it again when the catalog wants it.",
}

// toFleet sends the browser back to the fleet page after a control, saying
// what was done to whom.
func toFleet(w http.ResponseWriter, r *http.Request, done, who string) {
	q := url.Values{"done": {done}, "who": {who}}
	http.Redirect(w, r, "/fleet?"+q.Encode(), http.StatusSeeOther)
}

// replicaOf is the replica id as the fleet shows it now, engine keys taken
// out, for an API answer; ok is false when it is gone.
func (s *Server) replicaOf(id string) (fleet.Replica, bool) {
	snap, _ := s.snapshot()
	for _, r := range snap.replicas {
		if r.ID == id {
			return r, true
		}
	}
	return fleet.Replica{}, false
}

// modelHealthOf is how the fleet fares with model now.
func (s *Server) modelHealthOf(model string) (fleet.ModelHealth, bool) {
	snap, _ := s.snapshot()
	for _, h := range snap.models {
		if h.Model == model {
			return h, true
		}
	}
	return fleet.ModelHealth{}, false
}

// noControls is the refusal when nothing runs replicas to control.
const noControls = "this modelserve runs no fleet, so there is no replica or park to act on"

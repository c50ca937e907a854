package fleet

import (
	"context"

	"modelserve/internal/operr"
)

// The operator's hands on the fleet: the reconciling decides what runs,
// and these let a person overrule it for one replica or one model without
// editing the catalog. Before them the console could only say "stop that
// replica" or "fix the cause", and then the one way to act was to remove
// the model and serve it again.

// Stop stops replica id's engine. The catalog is not changed: a model that
// still wants as many replicas is given a fresh one by the next
// reconciling, placed wherever it fits then; scaling the model down is how
// to run fewer.
func (f *Fleet) Stop(id string) error {
	f.mu.Lock()
	r, err := f.controlledLocked(id)
	if err != nil {
		f.mu.Unlock()
		return err
	}
	f.stopLocked(r, "stopped by an operator")
	f.backend.Note(id, "modelserve: stopping, as an operator asked")
	f.mu.Unlock()
	f.log.Info("replica stopped by an operator", "replica", id)
	f.Poke()
	return nil
}

// Restart stops replica id's engine and starts it again in the same place
// (node, cards, arguments), without counting it as a failure; a replica
// waiting to restart after a failure is started at once.
func (f *Fleet) Restart(id string) error {
	f.mu.Lock()
	r, err := f.controlledLocked(id)
	if err != nil {
		f.mu.Unlock()
		return err
	}
	if r.stopping {
		f.mu.Unlock()
		return operr.New(operr.Conflict, "replica %s is stopping and cannot be restarted; the fleet places a new one if its model still wants it", id)
	}
	f.backend.Restart(id, "restarting, as an operator asked")
	f.mu.Unlock()
	f.log.Info("replica restarted by an operator", "replica", id)
	return nil
}

// controlledLocked is the replica an operator's Stop or Restart is about;
// f.mu is held.
func (f *Fleet) controlledLocked(id string) (*replica, error) {
	r, ok := f.replicas[id]
	if !ok {
		return nil, operr.New(operr.NotFound, "the fleet has no replica named %s: it may have stopped since; GET /api/v1/replicas lists those it has", operr.Quote(id))
	}
	if r.released {
		return nil, operr.New(operr.Conflict, "replica %s has ended: its model %s is parked; unpark the model once the cause is fixed", id, r.model)
	}
	return r, nil
}

// Unpark lets the fleet start model again after it was parked: its count
// of failed starts begins at nought, its failed replicas are forgotten, and
// the park kept in the database goes too, so a restart of modelserve does
// not park it again. Fix the cause first: a model unparked as it was fails
// as often again before it is parked again.
func (f *Fleet) Unpark(ctx context.Context, model string) error {
	f.mu.Lock()
	st := f.models[model]
	_, restored := f.restored[model]
	running := f.running
	f.mu.Unlock()
	switch {
	case !running:
		return operr.New(operr.Unavailable, "the fleet is not running, so %s cannot be unparked now; try again in a moment", operr.Quote(model))
	case st == nil && !restored:
		return operr.New(operr.NotFound, "the fleet has no model named %s: GET /api/v1/catalog lists the catalog's models", operr.Quote(model))
	case !restored && !st.parked:
		return operr.New(operr.Conflict, "%s is not parked: the fleet already starts it when the catalog wants it", model)
	}
	// The kept park first: were it left behind, the next start of
	// modelserve would park the model again.
	if err := f.opts.Parks.forget(ctx, model); err != nil {
		return err
	}
	f.mu.Lock()
	delete(f.restored, model)
	if st := f.models[model]; st != nil {
		st.parked, st.lasting, st.engineMissing, st.reason, st.failedStarts = false, false, false, "", 0
	}
	for id, r := range f.replicas {
		if r.model == model && r.released {
			delete(f.replicas, id) // the failed replicas of before
		}
	}
	f.mu.Unlock()
	f.log.Info("model unparked by an operator", "model", model)
	f.Poke()
	return nil
}

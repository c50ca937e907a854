package jobs

import (
	"context"
	"errors"
	"modelserve/internal/fleet"
	"testing"

	"modelserve/catalog"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// TestACancelDuringPlacementTakesItsEntryOut: a job cancelled while its
// replica is being placed ends cancelled with nothing of it in the
// catalog, as the README promises; a re-serve of a model already in the
// catalog, cancelled the same way, leaves the entry it found.
func TestACancelDuringPlacementTakesItsEntryOut(t *testing.T) {
	for _, before := range []bool{false, true} {
		name := map[bool]string{false: "a new model", true: "a model served before"}[before]
		t.Run(name, func(t *testing.T) {
			f := &fakeFleet{health: fleet.ModelHealth{Model: "tiny"}} // never ready
			f.endpoint = engine(t, 200, 0).URL
			e := newEnv(t, withNodeMemory(64<<30), withFleet(f))
			e.addModel(tinyRepo, hubtest.RepoOptions{}, map[string]ggufgen.Spec{tinyFile: {}})
			ctx := context.Background()
			if before {
				// Served before, on demand: the entry this job finds.
				if j := MustEnd(t, e.srv, MustStart(t, e.srv, Request{Repo: tinyRepo, Replicas: 0}).ID); j.State != Done {
					t.Fatalf("the first serve ended %s: %s", j.State, j.Error)
				}
			}
			j := MustStart(t, e.srv, Request{Repo: tinyRepo, Replicas: 1})
			waitForStep(t, e.srv, j.ID, StepPlacement)
			got, err := e.srv.Cancel(ctx, j.ID)
			if err != nil || got.State != Cancelled {
				t.Fatalf("cancel: %s %v", got.State, err)
			}
			m, err := e.catalog.Get(ctx, "tiny")
			switch {
			case !before && !errors.Is(err, catalog.ErrNotFound):
				t.Errorf("after the cancel the catalog has tiny (%v, %+v), which the job added", err, m.Scaling)
			case before && err != nil:
				t.Errorf("the cancel of a re-serve took out the entry that was there before it: %v", err)
			}
			if stored, _ := e.srv.Get(ctx, j.ID); stored.State != Cancelled {
				t.Errorf("stored as %s", stored.State)
			}
		})
	}
}

package fleet

import (
	"context"
	"strings"
	"testing"

	"modelserve/catalog"
	"modelserve/internal/ggufgen"
	"modelserve/internal/operr"
	"modelserve/internal/testkit"
)

// An operator unparks a model: the park kept in the database goes with it,
// so a restart of modelserve does not park the model again, and the fleet
// starts it once more (here it fails again, and is parked again: the cause
// was not fixed).
func TestUnparkForgetsTheKeptPark(t *testing.T) {
	db := testkit.OpenDB(t)
	cat := catalog.NewStore(db)
	f := MustRun(t, cat, Options{Parks: NewParks(db)})
	MustAdd(t, f.notifying(cat), entry("foo", MustWriteModel(t, "foo.gguf", ggufgen.Spec{Architecture: "foo"}), 1))
	testkit.WaitFor(t, 2*readyWithin, "foo parked", func() (bool, string) {
		h, _ := f.health("foo")
		return h.Parked, "health " + h.Reason
	})

	if err := f.Unpark(context.Background(), "foo"); err != nil {
		t.Fatalf("Unpark: %v", err)
	}
	if got := keptParks(t, db); len(got) != 0 {
		t.Errorf("after Unpark the database keeps the parks of %v", got)
	}
	// Started again from nought: one failure, not parked at once.
	testkit.WaitFor(t, 2*readyWithin, "foo started again", func() (bool, string) {
		for _, r := range f.Replicas() {
			if r.Model == "foo" && r.State != Failed {
				return true, ""
			}
		}
		h, _ := f.health("foo")
		return false, "health " + h.Reason
	})

	for _, tc := range []struct {
		name string
		err  error
		kind operr.Kind
		says string
	}{
		{"no such model", f.Unpark(context.Background(), "nope"), operr.NotFound, "no model named"},
		{"no such replica", f.Stop("nope-1"), operr.NotFound, "no replica named"},
		{"restart no such replica", f.Restart("nope-1"), operr.NotFound, "no replica named"},
	} {
		e, ok := operr.As(tc.err)
		if !ok || e.Kind != tc.kind || !strings.Contains(e.Msg, tc.says) {
			t.Errorf("%s: %v, want a %s sentence saying %q", tc.name, tc.err, tc.kind, tc.says)
		}
	}
}

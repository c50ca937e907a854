package jobs

import (
	"context"
	"strings"
	"testing"

	"modelserve/catalog"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/operr"
	"modelserve/internal/updates"
)

// fakeUpdates holds the updates a test says were noticed.
type fakeUpdates struct{ list []updates.Update }

func (f *fakeUpdates) Get(_ context.Context, id int64) (updates.Update, error) {
	for _, u := range f.list {
		if u.ID == id {
			return u, nil
		}
	}
	return updates.Update{}, operr.New(operr.NotFound, "there is no update %d", id)
}

func (f *fakeUpdates) List(context.Context, updates.ListOptions) ([]updates.Update, error) {
	return f.list, nil
}

func (f *fakeUpdates) InPlace(context.Context, string) (bool, error) { return true, nil }

func (f *fakeUpdates) SetState(_ context.Context, id int64, state string) error {
	for i := range f.list {
		if f.list[i].ID == id {
			f.list[i].State = state
		}
	}
	return nil
}

func kindOf(err error) operr.Kind {
	if e, ok := operr.As(err); ok {
		return e.Kind
	}
	return ""
}

// TestUpdateRefusals: an update is refused, starting nothing, when it
// cannot be served the way its model was; a serve request cannot pose as
// an update.
func TestUpdateRefusals(t *testing.T) {
	ups := &fakeUpdates{}
	e := newEnv(t, withNodeMemory(64<<30), withFleet(&fakeFleet{readyAt: 1}), func(e *testEnv) { e.deps.Updates = ups })
	e.addModel(tinyRepo, hubtest.RepoOptions{}, map[string]ggufgen.Spec{tinyFile: {}})
	ctx := context.Background()

	if _, err := e.srv.Start(ctx, Request{Repo: tinyRepo, CanaryOf: "tiny", Share: 0.5, Replicas: 1}); kindOf(err) != operr.Invalid ||
		!strings.Contains(err.Error(), "POST /api/v1/catalog/{name}/update") {
		t.Errorf("a serve request posing as an update: %v", err)
	}
	if _, err := e.srv.Update(ctx, UpdateRequest{Model: "tiny"}); kindOf(err) != operr.NotFound {
		t.Errorf("updating a model the catalog lacks: %v", err)
	}

	// Added by hand, with an origin but no job that served it.
	m := catalog.Model{Name: "tiny", ContextLength: 1024, Profiles: []catalog.Profile{{Name: "cpu", Engine: EngineLlamaCpp}},
		Origin: &catalog.Origin{Repo: tinyRepo, Revision: strings.Repeat("a", 40), Ref: "main", RefKind: "branch"}}
	if err := e.catalog.Add(ctx, m, "tester"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.Update(ctx, UpdateRequest{Model: "tiny"}); kindOf(err) != operr.Conflict || !strings.Contains(err.Error(), "has no update available") {
		t.Errorf("updating with no update noticed: %v", err)
	}
	ups.list = []updates.Update{{ID: 7, Model: "tiny", OldCommit: strings.Repeat("0", 40), NewCommit: strings.Repeat("b", 40), State: updates.StateAvailable}}
	if _, err := e.srv.Update(ctx, UpdateRequest{Model: "tiny", UpdateID: 7}); kindOf(err) != operr.Conflict || !strings.Contains(err.Error(), "runs aaaaaaa now") {
		t.Errorf("an update from another commit than the model runs: %v", err)
	}
	ups.list[0].OldCommit = m.Origin.Revision
	if _, err := e.srv.Update(ctx, UpdateRequest{Model: "tiny", Share: 2}); kindOf(err) != operr.Invalid {
		t.Errorf("a share of 2: %v", err)
	}
	if _, err := e.srv.Update(ctx, UpdateRequest{Model: "tiny"}); kindOf(err) != operr.Conflict || !strings.Contains(err.Error(), "no job served tiny") {
		t.Errorf("an update of a model no job served: %v", err)
	}
	if _, err := e.srv.Promote(ctx, "tiny", "tester"); kindOf(err) != operr.Conflict || !strings.Contains(err.Error(), "no update of tiny is on trial") {
		t.Errorf("promoting with nothing on trial: %v", err)
	}
	if ups.list[0].State != updates.StateAvailable {
		t.Errorf("a refused update is %s, want still available", ups.list[0].State)
	}
	if list, _, _ := e.srv.List(ctx, ListOptions{}); len(list) != 0 {
		t.Errorf("refusals started %d jobs", len(list))
	}
}

package handlers_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/handlers"
	"modelserve/internal/fleet"
	"modelserve/jobs"
)

// TestCatalogRowAtAGlance: a model's row is its figures, each a few
// characters (state, version, context × slots, replicas ready of wanted,
// memory), and its sentences (how each profile runs) are in the row's
// details, not in the row.
func TestCatalogRowAtAGlance(t *testing.T) {
	e := newConsoleEnv(t, func(d *handlers.Deps) { d.Fleet = busyFleet() })
	ctx := context.Background()
	for _, name := range []string{"tiny", "broken"} {
		if err := e.catalog.Add(ctx, tinyModel(name), "test"); err != nil {
			t.Fatal(err)
		}
	}
	gpu := tinyModel("huge")
	gpu.Profiles = []catalog.Profile{{Name: "l4", Engine: "llamacpp", Size: catalog.Size{Pool: 8192, Slots: 1}, GPUClass: "L4", GPUsPerNode: 2, CardBytes: 9 * gb}}
	if err := e.catalog.Add(ctx, gpu, "test"); err != nil {
		t.Fatal(err)
	}
	doc := mustStatus(t, e.signedIn().get("/catalog"), http.StatusOK)
	for _, tc := range []struct {
		model string
		cells map[string]string
	}{
		{"tiny", map[string]string{"model-state": "✓ ready", "version": "c0ffeec", "size": "4096 × 4", "replicas": "1/1", "memory": "1.3 GB RAM"}},
		{"broken", map[string]string{"model-state": "✗ parked", "replicas": "0/1"}},
		{"huge", map[string]string{"model-state": "◐ waiting for room", "size": "8192 × 1", "memory": "9 GB × 2 cards"}},
	} {
		row := doc.Find(`[data-testid="model-row"][data-model="` + tc.model + `"] > tr:first-child`)
		for id, want := range tc.cells {
			got := strings.ReplaceAll(strings.TrimSpace(row.Find(`[data-testid="`+id+`"]`).Text()), "\u00a0", " ")
			if got != want {
				t.Errorf("%s's %s reads %q, want %q", tc.model, id, got, want)
			}
		}
	}
	tiny := doc.Find(`[data-testid="model-row"][data-model="tiny"]`)
	const runs = "a 16384-token pool in 4 slots of 4096 tokens; 1.3 GB of RAM"
	if strings.Contains(tiny.Find("tr:first-child").Text(), runs) {
		t.Error("the profile's sentence is in tiny's row: it belongs in its details")
	}
	if got := tiny.Find(`details[data-testid="model-more"] [data-testid="runs"]`).Text(); got != runs {
		t.Errorf("tiny's details say %q, want %q", got, runs)
	}
	if id := tiny.Find(`details[data-testid="model-more"]`).AttrOr("id", ""); id != "model-more-tiny" {
		t.Errorf("tiny's details have the id %q: the page keeps them open across its stream's swaps by it", id)
	}
}

// TestJobsListSaysKindAndOutcome: each job's kind, as its record says it,
// and how it ended in a word or two, with the sentence a failed one ended
// with one click away.
func TestJobsListSaysKindAndOutcome(t *testing.T) {
	e := newConsoleEnv(t)
	started := time.Now().Add(-time.Hour)
	failedAt := func(j jobs.Job, step, msg string) jobs.Job {
		j.State, j.Error = jobs.Failed, msg
		for i := range j.Steps {
			if j.Steps[i].Name == step {
				j.Steps[i].State, j.Steps = jobs.Failed, j.Steps[:i+1]
				break
			}
		}
		return j
	}
	served := doneJob("serve-0001", started)
	onDemand := doneJob("serve-0002", started.Add(time.Minute))
	onDemand.Request.Replicas = 0
	onDemand.Steps[5].State = jobs.Skipped
	refused := failedAt(doneJob("serve-0003", started.Add(2*time.Minute)), jobs.StepPlan, "no file fits the pool at 1048576 tokens")
	mirror := failedAt(doneJob("serve-0004", started.Add(3*time.Minute)), jobs.StepMirror, "the registry went away")
	trial := func(id string, at time.Duration) jobs.Job {
		j := doneJob(id, started.Add(at))
		j.Kind, j.Request.CanaryOf = jobs.KindUpdate, "tiny-llama"
		j.Steps = append(j.Steps, jobs.Step{Name: jobs.StepEval, State: jobs.Done}, jobs.Step{Name: jobs.StepCanary, State: jobs.Done},
			jobs.Step{Name: jobs.StepVerdict, State: jobs.Done})
		return j
	}
	promoted := trial("update-0005", 4*time.Minute)
	// A trial its canary judged ends as the jobs package ends it: failed,
	// with the verdict rolled back.
	rolledBack := failedAt(trial("update-0006", 5*time.Minute), jobs.StepVerdict, "tiny-llama@b2b2b2b rolled back, tiny-llama still serving c0ffee0: 2 of 10 answers failed")
	rolledBack.Steps[len(rolledBack.Steps)-1].State = jobs.RolledBack
	cancelled := doneJob("serve-0007", started.Add(6*time.Minute))
	cancelled.State = jobs.Cancelled
	for _, j := range []jobs.Job{served, onDemand, refused, mirror, promoted, rolledBack, cancelled} {
		mustInsertJob(t, e.db, j)
	}
	doc := mustStatus(t, e.signedIn().get("/jobs"), http.StatusOK)
	for _, tc := range []struct {
		id, kind, outcome, why string
	}{
		{served.ID, "serve", "✓ served", ""},
		{onDemand.ID, "serve", "✓ on demand", ""},
		{refused.ID, "serve", "✗ refused", refused.Error},
		{mirror.ID, "serve", "✗ failed at mirror", mirror.Error},
		{promoted.ID, "update", "✓ promoted", ""},
		{rolledBack.ID, "update", "↺ rolled back", rolledBack.Error},
		{cancelled.ID, "serve", "■ cancelled", ""},
	} {
		row := doc.Find(`[data-testid="job-row"][data-job="` + tc.id + `"]`)
		if got := row.Find(`[data-testid="job-kind"]`).Text(); got != tc.kind {
			t.Errorf("%s's kind reads %q, want %q", tc.id, got, tc.kind)
		}
		if got := strings.TrimSpace(row.Find(`[data-testid="job-outcome"]`).Text()); got != tc.outcome {
			t.Errorf("%s's outcome reads %q, want %q", tc.id, got, tc.outcome)
		}
		if got := row.Find(`details [data-testid="job-why"]`).Text(); got != tc.why {
			t.Errorf("%s's why reads %q, want %q", tc.id, got, tc.why)
		}
	}
}

// TestFleetPageSaysTheLastSwaps: the fleet's last replica given back of
// each model (fleet.GivenBack, in the fleet's own sentence) is a swap on
// the page, newest first: the model out, the model in, why, and how long
// the model in took to load since; and the model's details say its last
// stop.
func TestFleetPageSaysTheLastSwaps(t *testing.T) {
	now := time.Now()
	f := busyFleet()
	idle := fleet.Holder{ID: "tiny-1", Model: "tiny", LastUsed: now.Add(-27 * time.Second)}
	_, why := fleet.GiveBackWhy(idle, catalog.Model{Name: "beta"}, now)
	if !strings.HasPrefix(why, "given back for beta, idle for 27") {
		t.Fatalf("the fleet says a replica given back idle as %q", why)
	}
	critical := fleet.Holder{ID: "small-2", Model: "small", Class: catalog.ClassOpportunistic}
	_, whyCritical := fleet.GiveBackWhy(critical, catalog.Model{Name: "gamma", Class: catalog.ClassCritical}, now)
	for i := range f.models {
		switch f.models[i].Model {
		case "tiny":
			fleet.GivenBack{Replica: "tiny-1", For: "beta", Why: why, At: now.Add(-25 * time.Second)}.Tell(&f.models[i])
		case "small":
			fleet.GivenBack{Replica: "small-2", For: "gamma", Why: whyCritical, At: now.Add(-5 * time.Second)}.Tell(&f.models[i])
		case "huge":
			fleet.GivenBack{Replica: "huge-1", For: "delta", Why: "given back for delta, idle for 5m0s", At: now.Add(-time.Hour - 10*time.Second)}.Tell(&f.models[i])
		}
	}
	f.starts = append([]fleet.Start{
		{Replica: "beta-1", Model: "beta", Started: now.Add(-20 * time.Second), ReadyAt: now.Add(-18 * time.Second)},
		{Replica: "delta-1", Model: "delta", Started: now.Add(-time.Hour), ReadyAt: now.Add(-time.Hour + time.Second)},
	}, f.starts...)
	e := newConsoleEnv(t, func(d *handlers.Deps) { d.Fleet = f })
	doc := mustStatus(t, e.signedIn().get("/fleet"), http.StatusOK)

	swaps := doc.Find(`[data-testid="swap"]`)
	if swaps.Length() != 3 {
		t.Fatalf("%d swaps listed, want 3", swaps.Length())
	}
	// Newest first: gamma's, under way (it has not become ready since);
	// then beta's, newer than delta's.
	if got := swaps.Eq(2).Find(`[data-testid="swap-in"]`).Text(); got != "delta" {
		t.Errorf("the last swap listed is for %q, want delta, the oldest", got)
	}
	first, second := swaps.Eq(0), swaps.Eq(1)
	check := func(what string, got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("%s reads %q, want %q", what, got, want)
		}
	}
	check("the first swap's model out", first.Find(`[data-testid="swap-out"]`).Text(), "small")
	check("the first swap's model in", first.Find(`[data-testid="swap-in"]`).Text(), "gamma")
	check("the first swap's why", first.Find(`[data-testid="swap-why"]`).Text(), "stopped to make room for gamma, a critical model")
	check("the second swap's replica out", second.AttrOr("data-out", ""), "tiny-1")
	check("the second swap's model in", second.Find(`[data-testid="swap-in"]`).Text(), "beta")
	check("the second swap's why", second.Find(`[data-testid="swap-why"]`).Text(), why)
	check("the second swap's load", strings.TrimSpace(second.Find(`[data-testid="swap-took"]`).Text()), "2.0 s")
	check("tiny's last stop", strings.TrimSpace(doc.Find(`[data-testid="model-health"][data-model="tiny"] [data-testid="last-stop"]`).Text()), "tiny-1: "+why)

	// A fleet that has swapped nothing says what the list will hold.
	e = newConsoleEnv(t, func(d *handlers.Deps) { d.Fleet = busyFleet() })
	doc = mustStatus(t, e.signedIn().get("/fleet"), http.StatusOK)
	if doc.Find(`[data-testid="swap"]`).Length() != 0 || doc.Find(`[data-testid="no-swaps"]`).Length() != 1 {
		t.Error("a fleet that has swapped nothing lists swaps, or does not say why none")
	}
}

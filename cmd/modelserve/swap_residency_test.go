package main

import (
	"strings"
	"testing"
	"time"

	"modelserve/internal/fleet"
	"modelserve/internal/hubtest"
	"modelserve/internal/testkit"
	"modelserve/internal/words"
)

// TestASecondModelWaitsForTheFirstsResidency: two tiny models on demand
// in memory for one, with a residency of 3 s. A request for beta the
// moment alpha has answered its first does not take alpha's room: beta
// waits, the API says what it waits for, alpha goes on answering, and
// beta is answered once alpha's residency has passed, alpha's last stop
// saying it had it. Without the residency one token asking for the two
// in turn swapped at every request.
func TestASecondModelWaitsForTheFirstsResidency(t *testing.T) {
	const residency = 3 * time.Second
	s, c, _ := startSwapWorldSized(t, hubtest.New(t), swapBudget, []string{"alpha", "beta"}, []int{2048, 2048},
		func(cfg *config) { cfg.Residency = residency })
	if err := askModel(c, "alpha", "hello"); err != nil {
		t.Fatalf("alpha: %v", err)
	}
	var readyAt, started time.Time
	for _, r := range s.fleet().Replicas {
		if r.Model == "alpha" {
			readyAt, started = r.ReadyAt, r.Started
		}
	}
	if readyAt.IsZero() {
		t.Fatalf("alpha has no ready replica after its answer: %+v", s.fleet().Replicas)
	}

	beta := make(chan error, 1)
	go func() { beta <- askModel(c, "beta", "hello") }()
	placement := ""
	testkit.WaitFor(t, 10*time.Second, "beta waiting for alpha's residency", func() (bool, string) {
		for _, m := range s.fleet().Models {
			if m.Model == "beta" {
				placement = m.Placement
			}
		}
		return strings.Contains(placement, "waiting: alpha-1 is kept") && strings.Contains(placement, "(residency)"), "beta's placement: " + placement
	})
	// Alpha goes on answering meanwhile: its room is its own.
	if err := askModel(c, "alpha", "again"); err != nil {
		t.Fatalf("alpha while beta waits: %v", err)
	}
	if v := s.fleet(); v.running("alpha") != 1 {
		t.Fatalf("alpha given back inside its residency: %+v", v.Replicas)
	}
	select {
	case err := <-beta:
		t.Fatalf("beta answered (%v) inside alpha's residency, which ends %s after alpha was ready", err, residency)
	default:
	}
	if err := <-beta; err != nil {
		t.Fatalf("beta, once alpha's residency passed: %v", err)
	}
	if answered := time.Now(); answered.Before(readyAt.Add(residency)) {
		t.Errorf("beta answered %s after alpha was ready; want no sooner than its residency, %s", answered.Sub(readyAt), residency)
	}
	// Its residency is 3 s, or ten of its loads when those took longer
	// (a slow load on a busy machine).
	resided := "after its " + words.Span(fleet.Residency(residency, readyAt.Sub(started))) + " residency"
	for _, m := range s.fleet().Models {
		if m.Model == "alpha" && (!strings.Contains(m.LastStop, "given back for beta") || !strings.Contains(m.LastStop, resided)) {
			t.Errorf("alpha's last stop: %q; want it given back for beta %s", m.LastStop, resided)
		}
	}
}

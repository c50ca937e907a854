package evals_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"modelserve/internal/evals"
	"modelserve/internal/testkit"
)

// TestAHandoverEndsTheRunsSayingSo: as modelserve hands its port to a new
// process, a run in the background is stopped at once, and one a trial's
// job asks for ends as the job stops; each ends failed, saying a handover
// interrupted it after how many cases, before the new process starts (and
// finds none running to fail); no run starts in the background meanwhile.
// Once the handover failed and Continue says so, runs start again.
func TestAHandoverEndsTheRunsSayingSo(t *testing.T) {
	e := newEnv(t)
	e.add("chatty", commitA, false)
	e.add("canary", commitA, false)
	ctx := context.Background()
	asker := &heldAsker{hold: make(chan struct{}), asked: make(chan string, 10)}
	r := e.runner(e.db, asker)
	mustSet(t, r, "chatty", chatSuite)

	background, err := r.Start(ctx, "chatty", "chatty")
	if err != nil {
		t.Fatal(err)
	}
	<-asker.asked
	jctx, stopJob := context.WithCancel(ctx)
	trial := make(chan evals.Run, 1)
	go func() {
		run, err := r.Run(jctx, "chatty", "canary")
		if err != nil {
			t.Error(err)
		}
		trial <- run
	}()
	<-asker.asked

	r.HandOver()
	const why = "modelserve handed its port to a new process while the run was running, after 0 of 3 cases: " +
		"the new process does not carry it on; run it again there (an update's trial runs it again by itself)"
	if got, _ := r.Get(ctx, background.ID); got.State != evals.StateFailed || got.Error != why {
		t.Errorf("the run in the background once HandOver returned: %s %q; want failed saying %q", got.State, got.Error, why)
	}
	if _, err := r.Start(ctx, "chatty", "chatty"); !strings.Contains(errText(err), "modelserve is handing its port to a new process") {
		t.Errorf("a run started in the background during the handover: %v", err)
	}
	stopJob() // the job stops at the handover, as jobs.Server.Pause stops it
	if got := <-trial; got.State != evals.StateFailed || got.Error != why {
		t.Errorf("the trial's run stopped by its job during the handover: %s %q; want failed saying %q", got.State, got.Error, why)
	}
	if n, err := e.runner(e.open(), asker).FailInterrupted(ctx); err != nil || n != 0 {
		t.Errorf("the new process found %d runs running at its start (%v): the old one left them to be failed there", n, err)
	}

	r.Continue()
	close(asker.hold)
	run, err := r.Start(ctx, "chatty", "chatty")
	if err != nil {
		t.Fatalf("a run started after the handover failed: %v", err)
	}
	testkit.WaitFor(t, 10*time.Second, "the run after the failed handover done", func() (bool, string) {
		got, _ := r.Get(ctx, run.ID)
		return got.State == evals.StateDone, "it is " + string(got.State) + ": " + got.Error
	})
}

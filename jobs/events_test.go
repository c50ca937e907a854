package jobs

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// TestEventsSnapshotThenChanges: a watcher that joins mid-job gets the job
// as it stands, then every change in order, to the end.
func TestEventsSnapshotThenChanges(t *testing.T) {
	e := newEnv(t, withNodeMemory(64<<30))
	e.addModel(tinyRepo, hubtest.RepoOptions{}, map[string]ggufgen.Spec{tinyFile: {}})
	e.hub.Trickle(tinyRepo, tinyFile, 512<<10)
	j := MustStart(t, e.srv, Request{Repo: tinyRepo, Replicas: 1})
	waitFetching(t, e.srv, j.ID, 0)

	ch, stop := e.srv.Subscribe(j.ID)
	defer stop()
	var got []Event
	timeout := time.After(20 * time.Second)
	for len(got) == 0 || !got[len(got)-1].Job.Ended() {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("the channel closed after %d events", len(got))
			}
			got = append(got, ev)
		case <-timeout:
			t.Fatalf("no end after %d events", len(got))
		}
	}
	first := got[0]
	if first.Job.ID != j.ID || first.Seq < 2 || MustStep(t, first.Job, StepMirror).State != Running {
		t.Fatalf("the first event %d is not the job as it stood mid-fetch: %+v", first.Seq, first.Job.Steps)
	}
	var progress []int64
	for i, ev := range got[1:] {
		if ev.Seq != got[i].Seq+1 {
			t.Errorf("event %d follows %d", ev.Seq, got[i].Seq)
		}
		if len(ev.Job.Steps) < len(got[i].Job.Steps) {
			t.Errorf("event %d has fewer steps than the one before", ev.Seq)
		}
		if st, _ := ev.Job.Step(StepMirror); st.State == Running && st.BytesTotal > 0 {
			progress = append(progress, st.BytesDone)
		}
	}
	if !slices.IsSorted(progress) {
		t.Errorf("the download went backwards: %v", progress)
	}
	last := got[len(got)-1]
	if last.Job.State != Done {
		t.Errorf("last event: %s", last.Job.State)
	}
	_, seq, err := load(context.Background(), e.db, j.ID)
	if err != nil || seq != last.Seq {
		t.Errorf("stored change number %d, last event %d (%v)", seq, last.Seq, err)
	}

	// Joining after the end: the job as it ended, and nothing more.
	after, stopAfter := e.srv.Subscribe(j.ID)
	defer stopAfter()
	if ev := <-after; ev.Seq != last.Seq || ev.Job.State != Done {
		t.Errorf("a late watcher got %d %s", ev.Seq, ev.Job.State)
	}
	select {
	case ev, ok := <-after:
		t.Errorf("a late watcher got more: %v %+v", ok, ev)
	case <-time.After(50 * time.Millisecond):
	}

	nothing, stopNothing := e.srv.Subscribe("serve-0-none")
	defer stopNothing()
	if _, ok := <-nothing; ok {
		t.Error("watching no job gave an event")
	}
}

// TestSlowWatcherDropped: a watcher that stops reading is dropped, its
// channel closed, while the jobs it watched finish anyway.
func TestSlowWatcherDropped(t *testing.T) {
	e := newEnv(t, withNodeMemory(64<<30))
	slow, stop := e.srv.Subscribe("")
	defer stop()
	var ids []string
	for i := range 10 {
		repo := fmt.Sprintf("acme/Model%d-GGUF", i)
		e.addModel(repo, hubtest.RepoOptions{}, map[string]ggufgen.Spec{tinyFile: {Name: repo}})
		ids = append(ids, MustStart(t, e.srv, Request{Repo: repo, Replicas: 1}).ID)
	}
	for _, id := range ids {
		if j := MustEnd(t, e.srv, id); j.State != Done {
			t.Errorf("job %s ended %s: %s", id, j.State, j.Error)
		}
	}
	n := 0
	for closed := false; !closed; {
		select {
		case _, ok := <-slow:
			if ok {
				n++
			} else {
				closed = true
			}
		case <-time.After(time.Second):
			t.Fatalf("the slow watcher was not dropped; it had %d events waiting", n)
		}
	}
	if n != subscriberBuffer {
		t.Errorf("the slow watcher got %d events before it was dropped; want its buffer of %d", n, subscriberBuffer)
	}
}

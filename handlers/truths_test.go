package handlers_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"modelserve/handlers"
	"modelserve/internal/testkit"
	"modelserve/jobs"
)

// Small truths: what the pages say must be so.

func TestRunningJobSaysRunningFor(t *testing.T) {
	e := newConsoleEnv(t)
	b := e.signedIn()
	id := startJob(t, e, b)
	doc := mustStatus(t, b.get("/jobs/"+id), http.StatusOK)
	if got := doc.Find(`[data-testid="job-took"]`).Parent().Text(); !strings.HasPrefix(got, "running for ") {
		t.Errorf("a running job reads %q, want \"running for …\"", got)
	}
	// Step changes are announced in a region of their own; the swapped
	// region is not read out whole at every byte count.
	if doc.Find(`#job-live[aria-live]`).Length() != 0 || doc.Find(`[data-announce][aria-live="polite"]`).Length() != 1 {
		t.Error("the job page's live region is the whole job, not the step changes")
	}
	if doc.Find(`[data-live-status]`).Length() != 1 {
		t.Error("the job page has nowhere to say that its stream is cut")
	}

	// Cancelled during the download (which holds until then), not in
	// the moment between the plan and the mirror step.
	testkit.WaitFor(t, 10*time.Second, "the download started", func() (bool, string) {
		j, err := e.jobs.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(j.Steps, func(s jobs.Step) bool { return s.Name == jobs.StepMirror })
		return i >= 0 && j.Steps[i].State == jobs.Running, fmt.Sprintf("steps %+v", j.Steps)
	})
	resp := b.post("/jobs/"+id+"/cancel", nil)
	resp.Body.Close()
	doc = mustStatus(t, b.get("/jobs/"+id), http.StatusOK)
	if got := doc.Find(`[data-testid="job-took"]`).Parent().Text(); !strings.HasPrefix(got, "took ") {
		t.Errorf("an ended job reads %q, want \"took …\"", got)
	}
	// The step the cancel stopped was not a failure.
	states := texts(doc.Find(`[data-testid="step"] [data-testid="state"]`))
	if !slices.ContainsFunc(states, func(s string) bool { return strings.HasSuffix(s, "cancelled") }) ||
		slices.ContainsFunc(states, func(s string) bool { return strings.HasSuffix(s, "failed") }) {
		t.Errorf("a cancelled job's steps read %q: want the stopped one cancelled, none failed", states)
	}
	if got := texts(doc.Find(`[data-testid="detail"]`)); slices.Contains(got, "cancelled") {
		t.Errorf("the cancelled step says it again: %q", got)
	}
}

func TestOneJobIsOneJob(t *testing.T) {
	e := newConsoleEnv(t)
	mustInsertJob(t, e.db, doneJob("serve-1-aa", time.Now().Add(-time.Minute)))
	doc := mustStatus(t, e.signedIn().get("/jobs"), http.StatusOK)
	if got := doc.Find("main").Text(); strings.Contains(got, "1 jobs") || !strings.Contains(got, "1 job") {
		t.Errorf("the jobs page counts one job as %q", strings.Join(strings.Fields(got), " "))
	}
}

// TestLookUpKeepsTheTokenOutOfTheAddress: Look up and Choose submit the
// serve form as a GET; the token must not go with them (into the address,
// the history, the logs). Serve, a POST, carries it on its button.
func TestLookUpKeepsTheTokenOutOfTheAddress(t *testing.T) {
	e, _ := plannedEnv(t)
	b := e.signedIn()
	doc := mustStatus(t, b.get("/serve?repo="+url.QueryEscape(llamaRepo)), http.StatusOK)
	form := doc.Find(`form[data-testid="serve-form"]`)
	if n := form.Find(`input[name="csrf"]`).Length(); n != 0 {
		t.Errorf("the serve form has %d hidden token fields, which a GET submit sends", n)
	}
	serve := form.Find(`button[data-testid="serve-submit"]`)
	if serve.AttrOr("name", "") != "csrf" || serve.AttrOr("value", "") != b.csrf {
		t.Error("the Serve button does not carry the session's token")
	}
	if form.Find(`[autofocus]`).Length() != 0 {
		t.Error("a page nobody chose on takes the focus")
	}

	// After Choose, the focus is on the chosen row's button, where the
	// operator was.
	set := "Llama-3.1-8B-Instruct-F16"
	doc = mustStatus(t, b.get("/serve/report?"+url.Values{"repo": {llamaRepo}, "file": {set}}.Encode(), htmx...), http.StatusOK)
	focused := doc.Find(`[autofocus]`)
	if focused.Length() != 1 || focused.AttrOr("value", "") != set || focused.AttrOr("aria-pressed", "") != "true" {
		t.Errorf("after Choose, %d elements take the focus (%q)", focused.Length(), focused.AttrOr("value", ""))
	}
}

func TestMirrorRefusalLeadsBackToTheMirror(t *testing.T) {
	e := newConsoleEnv(t)
	b := e.signedIn()
	doc := mustStatus(t, b.post("/mirror", url.Values{"model": {"tiny"}, "revision": {"c0ffee0"}, "path": {"x.gguf"}, "confirm": {"yes"}}), http.StatusConflict)
	if got := doc.Find(`[data-testid="message"] a`).AttrOr("href", ""); got != "/mirror" {
		t.Errorf("a refusal on the mirror page leads to %q", got)
	}
}

// TestFleetStreamSendsWhatChanged: the fleet page's stream sends each
// section as it stands, then only those that change.
func TestFleetStreamSendsWhatChanged(t *testing.T) {
	f := busyFleet()
	e := newConsoleEnv(t, func(d *handlers.Deps) { d.Fleet = f })
	b := e.signedIn()
	resp := b.get("/fleet/stream")
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	events := readEvents(t, resp.Body)
	seen := map[string]string{}
	for len(seen) < 5 {
		ev := nextEvent(t, events)
		seen[ev.name] = ev.data
	}
	for _, name := range []string{"nodes", "replicas", "models", "swaps", "starts"} {
		if seen[name] == "" {
			t.Errorf("no %s section in the first events", name)
		}
	}
	if strings.Contains(seen["replicas"], engineKey) {
		t.Fatal("the stream shows an engine's key")
	}
	// Nothing changed: nothing but the heartbeat for a couple of looks.
	select {
	case ev := <-events:
		t.Fatalf("a quiet fleet sent %q", ev.name)
	case <-time.After(2500 * time.Millisecond):
	}
}

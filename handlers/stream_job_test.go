package handlers_test

import (
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
)

// parseEvent reads an event's data as the HTML htmx swaps in.
func parseEvent(t *testing.T, ev sseEvent) *goquery.Document {
	t.Helper()
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(ev.data))
	if err != nil {
		t.Fatal(err)
	}
	if doc.Find(`[data-testid="job"]`).Length() != 1 {
		t.Fatalf("event %q is not the job's live part:\n%.300s", ev.name, ev.data)
	}
	return doc
}

func TestJobStream(t *testing.T) {
	e := newConsoleEnv(t)
	e.fetch.steps, e.fetch.total, e.fetch.conns = []int64{1e9, 2e9, 3e9}, 5e9, 4
	b := e.signedIn()
	id := startJob(t, e, b)

	resp := b.get("/jobs/" + id + "/stream")
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	events := readEvents(t, resp.Body)

	// First the job as it stands: the same component the page renders.
	first := nextEvent(t, events)
	if first.name != "job" || first.id == "" {
		t.Fatalf("first event %q (id %q), want the job", first.name, first.id)
	}
	stepStates(t, parseEvent(t, first).Selection)

	// Then the download, with a rate once there are two readings.
	var withRate *goquery.Document
	for withRate == nil {
		ev := nextEvent(t, events)
		if ev.name != "job" {
			t.Fatalf("event %q before the job ended", ev.name)
		}
		doc := parseEvent(t, ev)
		mirrorStep := doc.Find(`[data-step="mirror"]`)
		if mirrorStep.Find("progress").Length() == 0 {
			continue
		}
		if got := mirrorStep.Find(`[data-testid="state"]`).Text(); !strings.Contains(got, "running") {
			t.Fatalf("the mirror step is %q while fetching", got)
		}
		if rate := mirrorStep.Find(`[data-testid="rate"]`).Text(); rate != "—" {
			withRate = doc
		}
	}
	p := withRate.Find(`[data-step="mirror"] progress`)
	if p.AttrOr("max", "") != "5000000000" || p.AttrOr("value", "") == "0" {
		t.Errorf("progress value %s of %s", p.AttrOr("value", ""), p.AttrOr("max", ""))
	}
	// How many connections the bytes come over, as the mirror page says it.
	if got := withRate.Find(`[data-testid="progress-text"]`).Text(); !strings.HasSuffix(got, "of 5 GB (40%), over 4 connections") &&
		!strings.HasSuffix(got, "of 5 GB (60%), over 4 connections") {
		t.Errorf("progress says %q", got)
	}
	if rate := withRate.Find(`[data-testid="rate"]`).Text(); !strings.HasSuffix(rate, "GB/s") && !strings.HasSuffix(rate, "MB/s") {
		t.Errorf("rate %q", rate)
	}

	// The end: the failure, in an event named "end", and the stream closes.
	close(e.fetch.release)
	var last sseEvent
	for ev := range events {
		last = ev
		if ev.name == "end" {
			break
		}
	}
	if last.name != "end" {
		t.Fatalf("the stream ended without an end event (last %q)", last.name)
	}
	doc := parseEvent(t, last)
	if got := doc.Find(`[data-testid="job"]`).AttrOr("data-state", ""); got != "failed" {
		t.Fatalf("the end event's job is %q", got)
	}
	if got := stepStates(t, doc.Selection)["mirror"]; got != "failed" {
		t.Errorf("the mirror step ended %q", got)
	}
	if got := doc.Find(`[data-testid="error"]`).Text(); got != "the mirror could not fetch it: the registry closed the connection" {
		t.Errorf("the failure says %q", got)
	}
	if doc.Find(`[data-testid="retry"]`).Length() != 1 {
		t.Error("the end event offers no Retry")
	}
	waitClosed(t, events)

	// Coming back to a job that has ended: its state, and the stream ends.
	resp2 := b.get("/jobs/" + id + "/stream")
	defer resp2.Body.Close()
	again := readEvents(t, resp2.Body)
	if ev := nextEvent(t, again); ev.name != "end" {
		t.Fatalf("reconnecting to an ended job: event %q, want end", ev.name)
	}
	waitClosed(t, again)
}

func waitClosed(t *testing.T, events <-chan sseEvent) {
	t.Helper()
	select {
	case ev, ok := <-events:
		if ok {
			t.Fatalf("an event after the end: %q", ev.name)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream stayed open after the job ended")
	}
}

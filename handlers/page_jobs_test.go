package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"modelserve/jobs"
)

var sevenSteps = []string{"registry", "plan", "mirror", "check", "catalog", "placement", "smoke test"}

// stepStates are the steps of a job page (or event) and their state words.
func stepStates(t *testing.T, doc *goquery.Selection) map[string]string {
	t.Helper()
	states := map[string]string{}
	var names []string
	doc.Find(`[data-testid="step"]`).Each(func(_ int, s *goquery.Selection) {
		name := s.AttrOr("data-step", "")
		names = append(names, name)
		// The state is a word beside its icon, never a colour alone.
		word := strings.TrimSpace(strings.TrimLeft(s.Find(`[data-testid="state"]`).First().Text(), "✓✗▶↷■◐○↓ "))
		states[name] = word
	})
	if !slices.Equal(names, sevenSteps) {
		t.Fatalf("steps %q, want the seven in order", names)
	}
	return states
}

func TestJobPageDone(t *testing.T) {
	e := newConsoleEnv(t)
	started := time.Now().Add(-time.Hour)
	mustInsertJob(t, e.db, doneJob("serve-1-done", started))
	doc := mustStatus(t, e.signedIn().get("/jobs/serve-1-done"), http.StatusOK)

	for name, word := range stepStates(t, doc.Selection) {
		if word != "done" {
			t.Errorf("step %s is %q, want done", name, word)
		}
	}
	if got := doc.Find(`[data-testid="reply"]`).Text(); got != "Hello there!" {
		t.Errorf("reply %q", got)
	}
	if got := doc.Find(`[data-testid="tps"]`).Text(); got != "812.4" {
		t.Errorf("tokens per second %q", got)
	}
	if doc.Find("[sse-connect]").Length() != 0 {
		t.Error("a job that has ended still opens an event stream")
	}
	if doc.Find(`[data-testid="cancel"], [data-testid="retry"]`).Length() != 0 {
		t.Error("a done job offers Cancel or Retry")
	}
	// The timeline: every step, the mirror's the largest share (58 of 70 s).
	segs := texts(doc.Find(`[data-testid="segment"]`))
	if len(segs) != 7 || segs[2] != "mirror 58 s (83%)" {
		t.Errorf("timeline %q", segs)
	}
	if got := doc.Find(`[data-testid="job-took"]`).Text(); got != "1 min 10 s" {
		t.Errorf("took %q", got)
	}
}

// TestJobPageNoText: a job whose model answered the smoke test with no
// text says so, rather than "Served." beside a blank where the answer
// goes; an embedding model, which answers with no text by nature, does
// not.
func TestJobPageNoText(t *testing.T) {
	e := newConsoleEnv(t)
	j := doneJob("serve-4-empty", time.Now().Add(-time.Minute))
	j.Reply = ""
	j.Steps[6].Detail = "answered with no text, at 812.4 tokens/s"
	mustInsertJob(t, e.db, j)
	doc := mustStatus(t, e.signedIn().get("/jobs/serve-4-empty"), http.StatusOK)
	got := strings.Join(strings.Fields(doc.Find(`[data-testid="outcome"]`).Text()), " ")
	if doc.Find(`[data-testid="no-text"]`).Length() != 1 || !strings.Contains(got, "Served. The model answered the smoke test with no text") {
		t.Errorf("the outcome of a job answered with no text says %q", got)
	}
	embed := doneJob("serve-5-embed", time.Now().Add(-time.Minute))
	embed.Request.Embeddings, embed.Reply = true, ""
	mustInsertJob(t, e.db, embed)
	if n := mustStatus(t, e.signedIn().get("/jobs/serve-5-embed"), http.StatusOK).Find(`[data-testid="no-text"]`).Length(); n != 0 {
		t.Error("an embedding model's job says it answered with no text")
	}
}

// TestJobPageOnDemand: a job that added its model on demand says so, and
// how it loads, rather than "Served." over steps that started nothing.
func TestJobPageOnDemand(t *testing.T) {
	e := newConsoleEnv(t)
	j := doneJob("serve-2-demand", time.Now().Add(-time.Minute))
	j.Request.Replicas, j.Reply, j.TokensPerSecond = 0, "", 0
	j.Steps[5] = jobs.Step{Name: jobs.StepPlacement, State: jobs.Skipped, Detail: "no replica started: tiny-llama is on demand", At: j.Steps[4].At}
	j.Steps[6] = jobs.Step{Name: jobs.StepSmoke, State: jobs.Skipped, Detail: "no replica was started to ask", At: j.Steps[4].At}
	mustInsertJob(t, e.db, j)
	doc := mustStatus(t, e.signedIn().get("/jobs/serve-2-demand"), http.StatusOK)
	got := strings.Join(strings.Fields(doc.Find(`[data-testid="outcome"]`).Text()), " ")
	if doc.Find(`[data-testid="on-demand"]`).Length() != 1 || strings.Contains(got, "Served.") ||
		!strings.Contains(got, "the first request for tiny-llama, or a first message in its playground, loads it") {
		t.Errorf("the outcome of a job that added its model on demand says %q", got)
	}
	// One that started its replica is served.
	mustInsertJob(t, e.db, doneJob("serve-3-done", time.Now().Add(-time.Minute)))
	if got := mustStatus(t, e.signedIn().get("/jobs/serve-3-done"), http.StatusOK).Find(`[data-testid="outcome"]`).Text(); !strings.Contains(got, "Served.") {
		t.Errorf("a served job's outcome says %q", got)
	}
}

func TestJobPageFailed(t *testing.T) {
	e := newConsoleEnv(t)
	j := doneJob("serve-1-failed", time.Now().Add(-time.Minute))
	j.State, j.Error, j.Reply, j.TokensPerSecond = jobs.Failed, "llama-server is not installed on this node: install llama.cpp", "", 0
	j.Steps = j.Steps[:4]
	j.Steps[3].State, j.Steps[3].Detail = jobs.Failed, j.Error
	mustInsertJob(t, e.db, j)
	doc := mustStatus(t, e.signedIn().get("/jobs/serve-1-failed"), http.StatusOK)

	want := map[string]string{"registry": "done", "plan": "done", "mirror": "done", "check": "failed",
		"catalog": "not run", "placement": "not run", "smoke test": "not run"}
	if got := stepStates(t, doc.Selection); !mapsEqual(got, want) {
		t.Errorf("states %v, want %v", got, want)
	}
	if got := doc.Find(`[data-testid="outcome"]`).Text(); !strings.Contains(got, "Failed at the check step:") ||
		!strings.Contains(got, j.Error) {
		t.Errorf("outcome %q", strings.Join(strings.Fields(got), " "))
	}
	form := doc.Find(`form[action="/jobs/serve-1-failed/retry"]`)
	if form.Length() != 1 || form.Find(`input[name="csrf"]`).AttrOr("value", "") == "" {
		t.Error("a failed job has no Retry form with its CSRF token")
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestJobPageNotFound(t *testing.T) {
	e := newConsoleEnv(t)
	doc := mustStatus(t, e.signedIn().get("/jobs/serve-0-nothing"), http.StatusNotFound)
	if got := doc.Find(`[role="alert"]`).Text(); !strings.Contains(got, `there is no job "serve-0-nothing"`) {
		t.Fatalf("a missing job says %q", got)
	}
}

// startJob starts a real job that runs until its download, where the fake
// mirror holds it.
func startJob(t *testing.T, e *consoleEnv, b *browser) string {
	t.Helper()
	e.reg.add(ggufRepo("test/tiny-GGUF"))
	resp := b.post("/serve", url.Values{"repo": {"test/tiny-GGUF"}, "replicas": {"1"}})
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/jobs/serve-") {
		t.Fatalf("serve: %s to %q", resp.Status, loc)
	}
	return strings.TrimPrefix(loc, "/jobs/")
}

func TestJobPageRunningAndCancel(t *testing.T) {
	e := newConsoleEnv(t)
	b := e.signedIn()
	id := startJob(t, e, b)
	doc := mustStatus(t, b.get("/jobs/"+id), http.StatusOK)
	live := doc.Find(`[sse-connect="/jobs/` + id + `/stream"]`)
	if live.Length() != 1 || live.AttrOr("hx-ext", "") != "sse" || live.AttrOr("sse-close", "") != "end" {
		t.Fatal("a running job's page does not follow its stream (hx-ext=sse, sse-connect, sse-close=end)")
	}
	if live.Find(`[sse-swap="job,end"] [data-testid="job"]`).Length() != 1 {
		t.Fatal("the stream's events do not swap the job's live part")
	}
	if doc.Find(`[data-testid="cancel"]`).Length() != 1 {
		t.Fatal("a running job offers no Cancel")
	}
	resp := b.post("/jobs/"+id+"/cancel", nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("cancel: %s", resp.Status)
	}
	j, err := e.jobs.Get(context.Background(), id)
	if err != nil || j.State != jobs.Cancelled {
		t.Fatalf("after Cancel the job is %q (%v)", j.State, err)
	}
	doc = mustStatus(t, b.get("/jobs/"+id), http.StatusOK)
	if doc.Find(`[data-testid="retry"]`).Length() != 1 {
		t.Fatal("a cancelled job offers no Retry")
	}
	resp = b.post("/jobs/"+id+"/retry", nil)
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc == "/jobs/"+id || !strings.HasPrefix(loc, "/jobs/serve-") {
		t.Fatalf("retry: %s to %q; want the new job", resp.Status, loc)
	}
	// Cancelling what has ended says so.
	doc = mustStatus(t, b.post("/jobs/"+id+"/cancel", nil), http.StatusConflict)
	if got := doc.Find(`[role="alert"]`).Text(); !strings.Contains(got, "has already ended") {
		t.Fatalf("cancelling an ended job says %q", got)
	}
}

func TestJobsPagePaginates(t *testing.T) {
	e := newConsoleEnv(t)
	start := time.Now().Add(-24 * time.Hour)
	for i := range 60 {
		mustInsertJob(t, e.db, doneJob(fmt.Sprintf("serve-%d-%04d", start.Unix()+int64(i), i), start.Add(time.Duration(i)*time.Minute)))
	}
	b := e.signedIn()
	doc := mustStatus(t, b.get("/jobs"), http.StatusOK)
	rows := doc.Find(`[data-testid="job-row"]`)
	if rows.Length() != 25 {
		t.Fatalf("page 1 holds %d jobs, want 25", rows.Length())
	}
	if first := rows.First().AttrOr("data-job", ""); !strings.HasSuffix(first, "-0059") {
		t.Errorf("page 1 starts with %s, want the newest", first)
	}
	if got := texts(rows.First().Find("td")); !strings.HasPrefix(got[0], "tiny-llama") || got[1] != "serve" || got[2] != "✓ done" ||
		got[3] != "✓ served" || got[4] != "smoke test" || got[6] != "1 min 10 s" {
		t.Errorf("a row reads %q", got)
	}
	if href := rows.First().Find(`[data-testid="job-link"]`).AttrOr("href", ""); !strings.HasPrefix(href, "/jobs/serve-") {
		t.Errorf("a row links to %q", href)
	}
	// Older jobs are reached by a cursor: the last job shown.
	next := doc.Find(`[data-testid="next"]`).AttrOr("href", "")
	if last := rows.Last().AttrOr("data-job", ""); next != "/jobs?before="+url.QueryEscape(last) || doc.Find(`[data-testid="newest"]`).Length() != 0 {
		t.Errorf("the newest page links on to %q (want before its last job, %s), or back", next, last)
	}
	if doc.Find(`[sse-connect="/jobs/stream"]`).Length() != 1 {
		t.Error("the list is not live")
	}
	// A job started meanwhile does not shift the older pages: the cursor
	// holds them still, where an offset would move each by one.
	mustInsertJob(t, e.db, doneJob(fmt.Sprintf("serve-%d-%04d", time.Now().Unix(), 60), time.Now()))
	doc = mustStatus(t, b.get(next), http.StatusOK)
	rows = doc.Find(`[data-testid="job-row"]`)
	if rows.Length() != 25 || !strings.HasSuffix(rows.First().AttrOr("data-job", ""), "-0034") {
		t.Errorf("the second page holds %d jobs from %s, want 25 from -0034", rows.Length(), rows.First().AttrOr("data-job", ""))
	}
	if doc.Find(`[data-testid="newest"]`).AttrOr("href", "") != "/jobs" {
		t.Error("an older page has no link back to the newest jobs")
	}
	if doc.Find(`[sse-connect="/jobs/stream`+strings.TrimPrefix(next, "/jobs")+`"]`).Length() != 1 {
		t.Error("an older page's stream does not keep its cursor")
	}
	doc = mustStatus(t, b.get(doc.Find(`[data-testid="next"]`).AttrOr("href", "")), http.StatusOK)
	if n := doc.Find(`[data-testid="job-row"]`).Length(); n != 10 {
		t.Errorf("the oldest page holds %d jobs, want 10", n)
	}
	if doc.Find(`[data-testid="next"]`).Length() != 0 {
		t.Error("the oldest page links on")
	}
	if got := strings.Join(strings.Fields(doc.Find(`[data-testid="jobs-count"]`).Text()), " "); got != "older jobs · 61 jobs in all" {
		t.Errorf("the oldest page's count reads %q", got)
	}
	// Links kept from the numbered pages: page 1 is the newest, the
	// others land there.
	if n := mustStatus(t, b.get("/jobs?page=1"), http.StatusOK).Find(`[data-testid="job-row"]`).Length(); n != 25 {
		t.Errorf("?page=1 holds %d jobs", n)
	}
	for _, old := range []string{"/jobs?page=3", "/jobs?page=zero"} {
		resp := b.get(old)
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/jobs" {
			t.Errorf("%s: %s to %q, want 303 to /jobs", old, resp.Status, loc)
		}
	}
	doc = mustStatus(t, b.get("/jobs?before=serve-nope"), http.StatusBadRequest)
	if got := doc.Find(`[role="alert"]`).Text(); !strings.Contains(got, `"serve-nope"`) {
		t.Errorf("an unknown cursor says %q", got)
	}
}

func TestJobsStreamRedraws(t *testing.T) {
	e := newConsoleEnv(t)
	b := e.signedIn()
	resp := b.get("/jobs/stream")
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	events := readEvents(t, resp.Body)
	first := nextEvent(t, events)
	if first.name != "jobs" || !strings.Contains(first.data, `data-testid="empty"`) {
		t.Fatalf("first event %q: %.200s", first.name, first.data)
	}
	id := startJob(t, e, e.signedIn())
	for {
		ev := nextEvent(t, events)
		doc, _ := goquery.NewDocumentFromReader(strings.NewReader(ev.data))
		if doc.Find(`[data-testid="job-row"][data-job="`+id+`"]`).Length() == 1 {
			break
		}
	}
}

func nextEvent(t *testing.T, events <-chan sseEvent) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-events:
		if !ok {
			t.Fatal("the stream ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event in 10 s")
	}
	return sseEvent{}
}

// TestJobPageOfAPromotedUpdate: the job of an update promoted says
// "Promoted." with its mark, and its links lead to the model, which runs
// the new version, not to the version's own name, gone from the catalog.
func TestJobPageOfAPromotedUpdate(t *testing.T) {
	e := newConsoleEnv(t)
	if err := e.catalog.Add(context.Background(), tinyModel("tiny-llama"), "test"); err != nil {
		t.Fatal(err)
	}
	j := doneJob("update-1-promoted", time.Now().Add(-time.Minute))
	j.Kind, j.Model = jobs.KindUpdate, "tiny-llama@c0ffee0"
	j.Request.CanaryOf, j.Request.Share = "tiny-llama", 0.1
	j.Steps = append(j.Steps,
		jobs.Step{Name: jobs.StepEval, State: jobs.Done, Detail: "its eval passed 1 of 1", At: j.Finished},
		jobs.Step{Name: jobs.StepCanary, State: jobs.Done, Detail: "no worse", At: j.Finished},
		jobs.Step{Name: jobs.StepVerdict, State: jobs.Done, Detail: "tiny-llama@c0ffee0 promoted: tiny-llama now serves c0ffee0", At: j.Finished})
	mustInsertJob(t, e.db, j)
	doc := mustStatus(t, e.signedIn().get("/jobs/update-1-promoted"), http.StatusOK)
	outcome := doc.Find(`[data-testid="outcome"]`)
	if got := strings.Join(strings.Fields(outcome.Text()), " "); outcome.Find(`[data-testid="promoted"] .state-promoted`).Length() != 1 ||
		strings.Contains(got, "Served.") || !strings.Contains(got, "✓ Promoted. tiny-llama now runs the new version") {
		t.Errorf("a promoted update's outcome says %q", got)
	}
	if got := outcome.Find(`[data-testid="model-link"]`).Text(); got != "See tiny-llama in the catalog" {
		t.Errorf("the outcome's link reads %q; want the model", got)
	}
	if got := outcome.Find(`[data-testid="playground-link"]`).AttrOr("href", ""); got != "" && got != "/catalog/tiny-llama/playground" {
		t.Errorf("the playground link leads to %q; want the model's", got)
	}
	if doc.Find(`[data-testid="call-it"][data-model="tiny-llama"]`).Length() != 1 {
		t.Error("no call-it panel for the model promoted")
	}
}

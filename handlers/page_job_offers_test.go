package handlers_test

import (
	"modelserve/catalog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"modelserve/jobs"
)

// refusedJob is a serve of the 8B's Q8_0 on a T4 with slots × ctx tokens,
// refused at its plan step as no node could ever host it.
func refusedJob(id string, ctx, slots int) jobs.Job {
	j := doneJob(id, time.Now().Add(-time.Minute))
	j.State, j.Reply, j.TokensPerSecond, j.Model = jobs.Failed, "", 0, ""
	j.Request = jobs.Request{Repo: llamaRepo, Revision: "main", File: "Llama-3.1-8B-Instruct-Q8_0.gguf", GPUClass: "T4", GPUsPerNode: 1,
		CtxPool: catalog.SizeForSlots(slots, ctx).Pool, ContextLength: ctx, Replicas: 1, Name: "chatty"}
	j.Error = "Llama-3.1-8B-Instruct-Q8_0 needs more than a T4 has"
	j.Steps = j.Steps[:2]
	j.Steps[1].State, j.Steps[1].Detail = jobs.Failed, j.Error
	return j
}

// TestRefusedJobOffersWhatFits: a job refused for its size offers no
// Retry, which would only be refused again, but what the plan says would
// fit, each a button that serves it: fewer slots of the context asked,
// the longest context that fits; and the API refuses to retry it.
func TestRefusedJobOffersWhatFits(t *testing.T) {
	e, _ := plannedEnv(t)
	mustInsertJob(t, e.db, refusedJob("serve-1-slots", 32768, 4))
	mustInsertJob(t, e.db, refusedJob("serve-2-long", 131072, 1))

	b := e.signedIn()

	doc := mustStatus(t, b.get("/jobs/serve-1-slots"), http.StatusOK)
	if doc.Find(`[data-testid="retry"]`).Length() != 0 {
		t.Error("a job refused for its size offers Retry")
	}
	if got := doc.Find(`[data-testid="refused"]`).Text(); !strings.Contains(got, "would be refused the same way again") {
		t.Errorf("the refusal says %q", strings.Join(strings.Fields(got), " "))
	}
	offers := doc.Find(`[data-testid="offer"]`)
	if offers.Length() == 0 {
		t.Fatalf("no offer; the outcome says %q", strings.Join(strings.Fields(doc.Find(`[data-testid="outcome"]`).Text()), " "))
	}
	first := offers.First()
	if got := first.Find(`[data-testid="offer-what"]`).Text(); got != "Llama-3.1-8B-Instruct-Q8_0 with 2 slots of 32768 tokens, in place of 4" {
		t.Errorf("the first offer says %q; want two slots of the context asked, what a T4 holds", got)
	}
	form := first.Find("form")
	vals := url.Values{}
	form.Find("input").Each(func(_ int, s *goquery.Selection) { vals.Set(s.AttrOr("name", ""), s.AttrOr("value", "")) })
	for k, want := range map[string]string{"repo": llamaRepo, "chosen": "Llama-3.1-8B-Instruct-Q8_0", "where": "gpu:T4:1:1",
		"ctx_pool": "65536", "slots": "2", "name": "chatty", "replicas": "1"} {
		if vals.Get(k) != want {
			t.Errorf("the offer posts %s=%q, want %q", k, vals.Get(k), want)
		}
	}
	if form.AttrOr("action", "") != "/serve" || vals.Get("csrf") == "" {
		t.Errorf("the offer's form posts to %q with csrf %q", form.AttrOr("action", ""), vals.Get("csrf"))
	}
	// Taking it starts a job, as the serve form would.
	vals.Del("csrf")
	resp := b.post("/serve", vals)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/jobs/serve-") {
		t.Errorf("taking the offer: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}

	// One slot of too long a context: the longest that fits.
	doc = mustStatus(t, b.get("/jobs/serve-2-long"), http.StatusOK)
	var whats []string
	doc.Find(`[data-testid="offer-what"]`).Each(func(_ int, s *goquery.Selection) { whats = append(whats, s.Text()) })
	if len(whats) == 0 || !strings.HasPrefix(whats[0], "Llama-3.1-8B-Instruct-Q8_0 with the longest context that fits: ") {
		t.Errorf("the offers %q; want the longest context that fits first", whats)
	}

	// A request naming no file, for a context no file fits: the plan for
	// it recommends none, and the offer is the file served by default,
	// at the longest context that fits.
	any := refusedJob("serve-4-any", 1<<20, 1)
	any.Request.File = ""
	mustInsertJob(t, e.db, any)
	doc = mustStatus(t, b.get("/jobs/serve-4-any"), http.StatusOK)
	whats = nil
	doc.Find(`[data-testid="offer-what"]`).Each(func(_ int, s *goquery.Selection) { whats = append(whats, s.Text()) })
	if len(whats) == 0 || !strings.HasPrefix(whats[0], "Llama-3.1-8B-Instruct-Q8_0 with the longest context that fits: ") {
		t.Errorf("the offers %q; want the default file at the longest context that fits", whats)
	}

	// A file no card holds at any context: the best quantisation that
	// fits at the context asked.
	f16 := refusedJob("serve-3-f16", 4096, 1)
	f16.Request.File = "Llama-3.1-8B-Instruct-F16.gguf"
	mustInsertJob(t, e.db, f16)
	doc = mustStatus(t, b.get("/jobs/serve-3-f16"), http.StatusOK)
	whats = nil
	doc.Find(`[data-testid="offer-what"]`).Each(func(_ int, s *goquery.Selection) { whats = append(whats, s.Text()) })
	if len(whats) != 1 || !strings.HasPrefix(whats[0], "Q8_0, a smaller quantisation of "+llamaRepo) {
		t.Errorf("the offers %q; want Q8_0, the largest file a T4 holds", whats)
	}

	// The API will not retry it either.
	resp = b.post("/jobs/serve-1-slots/retry", nil)
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("retrying a refused job from the console: %d, want 409", resp.StatusCode)
	}
}

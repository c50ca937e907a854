//go:build e2e

package e2e

import (
	"testing"
	"time"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// TestJobPageCatchesUp: the job page tells the truth after a reload in the
// middle of a download, and again within a second of its live connection
// coming back after a drop.
func TestJobPageCatchesUp(t *testing.T) {
	e := setup(t)
	const (
		repo = "acme/Slow-Llama-GGUF"
		set  = "Slow-Llama-Q4_K_M"
		file = set + ".gguf"
		size = 64 << 20
		rate = 4 << 20 // sixteen seconds of download
	)
	e.hub.AddRepo(repo, hubtest.RepoOptions{})
	e.hub.AddFile(repo, file, ggufgen.Bytes(ggufgen.Spec{ContextLength: 2048, PadTo: size}))
	e.hub.Trickle(repo, file, rate)

	tb := e.newTab(t)
	id := tb.serve(repo, set, "")
	if err := poll(quick, func() bool { return tb.progress() > 0 }); err != nil {
		t.Fatalf("the download never showed on the job page: progress %v", tb.progress())
	}

	// 1. A reload in the middle of the fetch shows at least as much as the
	// job had fetched before it, and goes on moving.
	before := e.srv.job(id).mirrorBytes()
	_, err := tb.page.Reload()
	tb.must(err, "reloading the job page")
	if err := poll(time.Second, func() bool { return tb.progress() >= float64(before) }); err != nil {
		t.Errorf("a second after the reload the page shows %v bytes; the job had fetched %d before it", tb.progress(), before)
	}
	shown := tb.progress()
	if err := poll(3*time.Second, func() bool { return tb.progress() > shown }); err != nil {
		t.Errorf("after the reload the progress bar stayed at %v for 3s", shown)
	}
	_, err = tb.page.Evaluate(`() => { window.__marker = 1 }`)
	tb.must(err, "setting the marker")

	// 2. The network drops every connection, the stream's too, for most of
	// a second, as a proxy restarting or a flaky link does: the page cannot
	// hear the job, which goes on.
	streams := tb.requestsTo("/stream")
	_, err = tb.page.Evaluate(`() => {
		window.__sse = [];
		const t0 = Date.now();
		for (const ev of ['htmx:sseError', 'htmx:sseOpen', 'htmx:sseClose']) {
			document.body.addEventListener(ev, e => window.__sse.push(ev + ' ' + (Date.now() - t0) + 'ms readyState=' + (e.detail.source ? e.detail.source.readyState : '?')));
		}
	}`)
	tb.must(err, "listening to the stream's events")
	e.front.cut()
	time.Sleep(300 * time.Millisecond)
	frozen := tb.progress()
	time.Sleep(500 * time.Millisecond)
	if tb.progress() != frozen {
		t.Fatalf("the page kept moving with the network down (%v, then %v): the drop did not cut the stream, so it tests nothing", frozen, tb.progress())
	}
	truth := e.srv.job(id)
	if truth.mirrorBytes() <= int64(frozen) {
		t.Fatalf("the job fetched nothing while the page was offline (%d bytes, the page shows %v)", truth.mirrorBytes(), frozen)
	}

	// It comes back: within a second the page shows at least what the job
	// had done when the connection returned.
	e.front.restore()
	back := time.Now()
	caughtUp := func() bool {
		if tb.stepState("mirror") == "done" {
			return true
		}
		return tb.progress() >= float64(truth.mirrorBytes())
	}
	err = poll(time.Second, caughtUp)
	showed := tb.progress()
	if err != nil {
		caught := poll(10*time.Second, caughtUp) == nil
		sse, _ := tb.page.Evaluate(`() => window.__sse`)
		t.Errorf("a second after the connection came back the page showed %v bytes; the job had fetched %d when it came back "+
			"(caught up later: %v, %s after it came back; the stream's events from the cut on: %v)",
			showed, truth.mirrorBytes(), caught, time.Since(back).Round(10*time.Millisecond), sse)
	} else {
		t.Logf("the page caught up %s after the connection came back", time.Since(back).Round(10*time.Millisecond))
	}
	if n := tb.requestsTo("/stream"); n <= streams {
		t.Errorf("the page did not open the job's stream again (%d requests to it before the drop, %d after)", streams, n)
	}

	// And it follows the job to its end without a reload.
	if state := tb.waitEnded(jobLimit); state != "done" {
		msg, _ := tb.loc("[data-testid=outcome]").InnerText()
		t.Fatalf("the job ended %s: %s", state, msg)
	}
	tb.showsTruth(id)
	marker, err := tb.page.Evaluate(`() => window.__marker`)
	tb.must(err, "reading the marker")
	if marker == nil {
		t.Error("the page was reloaded to catch up; want it to follow the stream")
	}
}

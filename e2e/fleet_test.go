//go:build e2e

package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// TestFleetPageLive: the fleet page follows a replica through a crash and
// the fleet's restart without a reload, and its controls restart, scale
// and stop replicas; then every page fits a 375 px phone.
func TestFleetPageLive(t *testing.T) {
	e := setup(t)
	const (
		repo = "acme/Fleet-Llama-GGUF"
		set  = "Fleet-Llama-Q8_0"
	)
	e.hub.AddRepo(repo, hubtest.RepoOptions{})
	e.hub.AddFile(repo, set+".gguf", ggufgen.Bytes(ggufgen.Spec{ContextLength: 2048}))

	tb := e.newTab(t)
	tb.serve(repo, set, "")
	if state := tb.waitEnded(jobLimit); state != "done" {
		msg, _ := tb.loc("[data-testid=outcome]").InnerText()
		t.Fatalf("the job ended %s: %s", state, msg)
	}
	model, err := tb.loc("[data-testid=job-model]").TextContent()
	tb.must(err, "reading the model's name")
	model = strings.TrimSpace(model)

	tb.open("/fleet")
	_, err = tb.page.Evaluate(`() => { window.__marker = 1 }`)
	tb.must(err, "setting the marker")
	first := model + "-1"
	rep := tb.loc(fmt.Sprintf("[data-testid=replica][data-replica=%q]", first))
	tb.must(tb.expect().Locator(rep).ToHaveAttribute("data-state", "ready"), "%s ready on the fleet page", first)
	pid := tb.pidOf(rep)

	// 1. The engine dies: the page shows the failure, then the restarted
	// engine, without a reload.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing the engine %d: %v", pid, err)
	}
	tb.must(tb.expect().Locator(rep.Locator("[data-testid=failures]")).ToContainText("1", playwright.LocatorAssertionsToContainTextOptions{Timeout: playwright.Float(20000)}),
		"the crash counted on the page")
	tb.must(tb.expect().Locator(rep).ToHaveAttribute("data-state", "ready", playwright.LocatorAssertionsToHaveAttributeOptions{Timeout: playwright.Float(60000)}),
		"%s ready again after the crash", first)
	if again := tb.pidOf(rep); again == pid {
		t.Errorf("the page still shows the killed engine's pid %d", pid)
	}
	tb.stillLoaded("the crash")
	tb.screenshot("fleet-after-crash.png")

	// 2. Restart from the page: the same replica, a new engine, no failure
	// counted.
	pid = tb.pidOf(rep)
	tb.must(rep.Locator("[data-testid=restart]").Click(), "pressing Restart")
	// A restart of a tiny model can be over before the page is read, so the
	// notice may already be the ready one; either way it names the restart.
	tb.must(tb.expect().Locator(tb.loc("[data-testid=notice]")).ToHaveText(regexp.MustCompile(regexp.QuoteMeta(first)+` (is restarting|restarted and is ready again)`)), "the page says it restarts")
	rep = tb.loc(fmt.Sprintf("[data-testid=replica][data-replica=%q]", first))
	if err := poll(60*time.Second, func() bool {
		st, _ := rep.GetAttribute("data-state")
		p, _ := rep.Locator("[data-testid=replica-process]").GetAttribute("data-pid")
		return st == "ready" && p != "" && p != strconv.Itoa(pid)
	}); err != nil {
		t.Fatalf("after Restart %s is not ready with a new engine", first)
	}
	tb.must(tb.expect().Locator(rep.Locator("[data-testid=failures]")).ToHaveText(regexp.MustCompile(`^1`)), "a restart asked for is not a failure")
	// Once ready, the page no longer says it is restarting.
	tb.must(tb.expect().Locator(tb.loc("[data-testid=notice]")).ToHaveText(first+" restarted and is ready again."), "the notice once %s is ready", first)

	// 3. Scale to two, then back to one.
	scale := func(min, max string) {
		m := tb.loc(fmt.Sprintf("[data-testid=model-health][data-model=%q]", model))
		tb.must(m.Locator("[data-testid=scale-min]").Fill(min), "typing the minimum")
		tb.must(m.Locator("[data-testid=scale-max]").Fill(max), "typing the maximum")
		tb.must(m.Locator("[data-testid=scale-submit]").Click(), "pressing Scale")
		tb.must(tb.expect().Locator(tb.loc("[data-testid=notice]")).ToContainText("is scaled"), "the page says it scaled")
	}
	scale("2", "2")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=replica][data-state=ready]")).ToHaveCount(2, playwright.LocatorAssertionsToHaveCountOptions{Timeout: playwright.Float(60000)}),
		"two replicas ready after scaling to 2")
	scale("1", "1")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=replica]")).ToHaveCount(1, playwright.LocatorAssertionsToHaveCountOptions{Timeout: playwright.Float(30000)}),
		"one replica after scaling back to 1")

	// 4. Stop: the replica goes, and the model, still wanting one, gets a
	// new one.
	only := tb.loc("[data-testid=replica]")
	id, err := only.GetAttribute("data-replica")
	tb.must(err, "reading the replica's id")
	tb.must(only.Locator("[data-testid=stop]").Click(), "pressing Stop")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=notice]")).ToContainText(id+" is stopping"), "the page says it stops")
	tb.must(tb.expect().Locator(tb.loc(fmt.Sprintf("[data-testid=replica][data-replica=%q]", id))).ToHaveCount(0, playwright.LocatorAssertionsToHaveCountOptions{Timeout: playwright.Float(30000)}),
		"%s gone after Stop", id)
	tb.must(tb.expect().Locator(tb.loc("[data-testid=replica][data-state=ready]")).ToHaveCount(1, playwright.LocatorAssertionsToHaveCountOptions{Timeout: playwright.Float(60000)}),
		"a new replica ready in its place")

	// 5. An engine that keeps dying right after it loads parks its model;
	// Unpark on the page starts it afresh.
	unpark := tb.loc(fmt.Sprintf("[data-testid=model-health][data-model=%q] [data-testid=unpark]", model))
	for kills := 0; ; kills++ {
		if n, _ := unpark.Count(); n > 0 {
			break
		}
		if kills == 4 {
			t.Fatalf("%s was not parked after %d crashes in a row", model, kills)
		}
		ready := tb.loc("[data-testid=replica][data-state=ready]")
		if err := poll(jobLimit, func() bool {
			n, _ := ready.Count()
			c, _ := unpark.Count()
			return n == 1 || c > 0
		}); err != nil {
			t.Fatal("no replica ready to crash, and the model not parked")
		}
		if n, _ := unpark.Count(); n > 0 {
			break
		}
		victim := tb.pidOf(ready)
		if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
			t.Fatalf("killing the engine %d: %v", victim, err)
		}
		tb.must(tb.expect().Locator(tb.loc(fmt.Sprintf("[data-testid=replica-process][data-pid=\"%d\"]", victim))).ToHaveCount(0,
			playwright.LocatorAssertionsToHaveCountOptions{Timeout: playwright.Float(30000)}), "the killed engine %d gone from the page", victim)
	}
	tb.must(tb.expect().Locator(tb.loc(fmt.Sprintf("[data-testid=model-health][data-model=%q] [data-testid=reason]", model))).ToContainText("killed"),
		"the parked model's reason names the crash")
	tb.must(unpark.Click(), "pressing Unpark")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=replica][data-state=ready]")).ToHaveCount(1, playwright.LocatorAssertionsToHaveCountOptions{Timeout: playwright.Float(60000)}),
		"a replica ready again after Unpark")
	tb.must(tb.expect().Locator(unpark).ToHaveCount(0), "the model no longer parked")

	// 6. At 375 px every page fits the width and every button is on screen.
	tb.must(tb.page.SetViewportSize(375, 800), "narrowing the window")
	for _, path := range []string{"/serve?repo=" + repo, "/jobs", "/catalog", "/mirror", "/fleet"} {
		tb.open(path)
		tb.fitsTheWidth(path)
	}
	tb.screenshot("fleet-375.png")
}

// pidOf is the engine's pid the replica's card shows.
func (tb *tab) pidOf(rep playwright.Locator) int {
	tb.t.Helper()
	var pid int
	if err := poll(quick, func() bool {
		s, _ := rep.Locator("[data-testid=replica-process]").GetAttribute("data-pid")
		pid, _ = strconv.Atoi(s)
		return pid > 0
	}); err != nil {
		tb.t.Fatal("the replica's card shows no engine pid")
	}
	return pid
}

// stillLoaded fails when the page was reloaded since the marker was set.
func (tb *tab) stillLoaded(since string) {
	tb.t.Helper()
	v, err := tb.page.Evaluate(`() => window.__marker`)
	tb.must(err, "reading the marker")
	if v == nil {
		tb.t.Errorf("the page was reloaded during %s: it should have followed live", since)
	}
}

// fitsTheWidth checks that the page does not scroll sideways and that every
// button is inside the window's width.
func (tb *tab) fitsTheWidth(path string) {
	tb.t.Helper()
	raw, err := tb.page.Evaluate(`() => {
		const w = document.documentElement.clientWidth;
		const wide = document.documentElement.scrollWidth;
		const out = [];
		for (const b of document.querySelectorAll('main button, main [role=button]')) {
			const r = b.getBoundingClientRect();
			if (r.width === 0 && r.height === 0) continue; // hidden on purpose
			if (r.left < 0 || r.right > w + 1) out.push((b.textContent || '').trim() + ' at ' + Math.round(r.left) + '..' + Math.round(r.right));
		}
		return JSON.stringify({w, wide, out});
	}`)
	tb.must(err, "measuring %s", path)
	s := raw.(string)
	if !strings.Contains(s, `"out":[]`) {
		tb.t.Errorf("%s at 375 px: buttons off screen: %s", path, s)
	}
	var w, wide int
	fmt.Sscanf(s[strings.Index(s, `"w":`):], `"w":%d,"wide":%d`, &w, &wide)
	if wide > w {
		tb.t.Errorf("%s at 375 px scrolls sideways: %d px wide in a %d px window", path, wide, w)
		tb.screenshot("narrow" + strings.ReplaceAll(strings.Split(path, "?")[0], "/", "-") + ".png")
	}
}

// TestConnectionLostIsSaid: while a download runs, the network drops; the
// job page says so and stops its time left until the stream is back, and
// the mirror page follows the same download live, with its rate and the
// job waiting on it.
func TestConnectionLostIsSaid(t *testing.T) {
	e := setup(t)
	const (
		repo = "acme/Cut-Llama-GGUF"
		set  = "Cut-Llama-Q4_K_M"
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
		t.Fatalf("the download never showed on the job page")
	}

	// The mirror page, in a second tab, follows the download.
	mp := e.newTab(t)
	mp.open("/mirror")
	row := mp.loc(fmt.Sprintf("[data-testid=file-row][data-path=%q]", file))
	mp.must(mp.expect().Locator(row).ToHaveAttribute("data-state", "fetching"), "the file fetching on the mirror page")
	mp.must(mp.expect().Locator(row.Locator("[data-testid=rate]")).Not().ToHaveText("—"), "a rate on the mirror page")
	mp.must(mp.expect().Locator(row.Locator("[data-testid=waiting-jobs] a")).ToHaveText(id), "the job waiting on the file")
	var before float64
	if v, err := row.Locator("progress").GetAttribute("value"); err == nil {
		before, _ = strconv.ParseFloat(v, 64)
	}
	if err := poll(5*time.Second, func() bool {
		v, _ := row.Locator("progress").GetAttribute("value")
		now, _ := strconv.ParseFloat(v, 64)
		return now > before
	}); err != nil {
		t.Error("the mirror page's bar did not move without a reload")
	}
	mp.screenshot("mirror-live.png")

	status := tb.loc("[data-live-status]")
	e.front.cut()
	tb.must(tb.expect().Locator(status).ToHaveText("connection lost — reconnecting"), "the job page says the connection is lost")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=left]")).ToHaveText("—"), "the time left stops while the connection is lost")
	tb.screenshot("connection-lost.png")
	e.front.restore()
	tb.must(tb.expect().Locator(status).ToHaveText(""), "the job page's warning gone once the stream is back")

	// Right after a reload the rate is the last one known, not "—".
	_, err := tb.page.Reload()
	tb.must(err, "reloading the job page")
	if n, _ := tb.loc("[data-testid=rate]").Count(); n > 0 {
		if r, _ := tb.loc("[data-testid=rate]").TextContent(); strings.TrimSpace(r) == "—" {
			t.Error("right after a reload the rate reads —")
		}
	}
}

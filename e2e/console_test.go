//go:build e2e

package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/playwright-community/playwright-go"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// TestCatalogAndFleetFollowTheModel: with a model served, the catalog page
// counts a request made through the gateway without a reload, and shows
// the tokens a second the smoke test measured beside the estimate; the
// fleet page shows its replica as one compact row whose details, once
// opened, stay open while the live figures change under them.
func TestCatalogAndFleetFollowTheModel(t *testing.T) {
	e := setup(t)
	const repo, set = "acme/Live-Llama-GGUF", "Live-Llama-Q8_0"
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
	ask := func() {
		t.Helper()
		var out map[string]any
		e.srv.api("POST", "/v1/chat/completions", map[string]any{"model": model, "max_tokens": 8,
			"messages": []map[string]string{{"role": "user", "content": "Say hello."}}}, &out)
	}

	// 1. The catalog: live, and its speeds.
	tb.open("/catalog")
	_, err = tb.page.Evaluate(`() => { window.__marker = 1 }`)
	tb.must(err, "setting the marker")
	row := tb.loc(fmt.Sprintf("[data-testid=model-row][data-model=%q]", model))
	// The smoke test's request is the first in the gateway's minute.
	tb.must(tb.expect().Locator(row.Locator("[data-testid=requests]")).ToHaveText("1 request"), "the smoke test's request counted")
	tb.must(tb.expect().Locator(row.Locator("[data-testid=speed-measured]")).ToHaveText(regexp.MustCompile(`^[0-9.]+ tokens/s measured$`)),
		"the smoke test's speed on the catalog")
	tb.must(tb.expect().Locator(row.Locator("[data-testid=speed-estimate]")).ToHaveText(regexp.MustCompile(`^≈ [0-9.]+ tokens/s estimated$`)),
		"the plan's estimate beside it")
	ask()
	tb.must(tb.expect().Locator(row.Locator("[data-testid=requests]")).ToHaveText("2 requests", playwright.LocatorAssertionsToHaveTextOptions{Timeout: playwright.Float(10000)}),
		"the request counted on the catalog page without a reload")
	if marker, err := tb.page.Evaluate(`() => window.__marker`); err != nil || marker != 1 {
		t.Errorf("the catalog page was reloaded (marker %v, %v): it should follow by its stream", marker, err)
	}

	// 2. The fleet: a row a replica, its details on demand.
	tb.open("/fleet")
	rep := tb.loc(fmt.Sprintf("[data-testid=replica][data-replica=%q]", model+"-1"))
	tb.must(tb.expect().Locator(rep).ToHaveAttribute("data-state", "ready"), "the replica ready on the fleet page")
	box, err := rep.Locator("tr").First().BoundingBox()
	tb.must(err, "measuring the replica's row")
	if box.Height > 160 {
		t.Errorf("the replica's row is %.0f px tall at 1280 px: want a compact row", box.Height)
		tb.screenshot("fleet-row.png")
	}
	more := rep.Locator("[data-testid=replica-more]")
	tb.must(tb.expect().Locator(more.Locator("[data-testid=endpoint]")).Not().ToBeVisible(), "the endpoint hidden until asked")
	tb.must(more.Locator("summary").Click(), "opening the replica's details")
	tb.must(tb.expect().Locator(more.Locator("[data-testid=endpoint]")).ToBeVisible(), "the endpoint shown once asked")
	before, err := rep.Locator("[data-testid=replica-load]").TextContent()
	tb.must(err, "reading the replica's load")
	ask()
	tb.must(tb.expect().Locator(rep.Locator("[data-testid=replica-load]")).Not().ToHaveText(before, playwright.LocatorAssertionsToHaveTextOptions{Timeout: playwright.Float(15000)}),
		"the load redrawn after a request")
	tb.must(tb.expect().Locator(more).ToHaveAttribute("open", ""), "the details still open after the replicas were redrawn")
	model1 := tb.loc(fmt.Sprintf("[data-testid=model-health][data-model=%q]", model))
	tb.must(tb.expect().Locator(model1.Locator("[data-testid=speed-measured]")).ToHaveText(regexp.MustCompile(`tokens/s measured$`)),
		"the measured speed on the fleet page")
}

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

// TestEvalSuite: an operator gives a served model an eval suite and runs
// it from the console. From the catalog they reach the model's evals page;
// a suite with a mistake comes back in the editor with the sentence and
// the text kept; a good one is saved; Run now fills the run's column in
// as the cases are answered, without a reload; a second run stands beside
// the first with the same verdicts (the tiny model answers the same at
// temperature 0).
func TestEvalSuite(t *testing.T) {
	e := setup(t)
	const repo = "acme/Chatty-GGUF"
	e.hub.AddRepo(repo, hubtest.RepoOptions{})
	e.hub.AddFile(repo, "Chatty-Q8_0.gguf", ggufgen.Bytes(ggufgen.Spec{ContextLength: 2048}))
	model := e.srv.serveModel(map[string]any{"repo": repo, "replicas": 1}).Model
	page := "/catalog/" + model + "/evals"

	tb := e.newTab(t)
	tb.open("/catalog")
	row := tb.loc(fmt.Sprintf("[data-testid=model-row][data-model=%q]", model))
	tb.must(row.Locator("[data-testid=evals-link]").Click(), "following the catalog's link to the evals")
	tb.atPath(page, "on %s's evals page", model)
	tb.must(tb.expect().Locator(tb.loc("[data-testid=suite-summary]")).ToContainText("No suite yet"), "a model without a suite")

	editor := tb.page.GetByLabel("The suite, as JSON")
	save := tb.page.GetByRole("button", playwright.PageGetByRoleOptions{Name: "Save the suite"})
	bad := `{"cases": [{"name": "capital", "prompt": "What is the capital of France?", "expect": {"regex": "(?i)paris("}}]}`
	tb.must(editor.Fill(bad), "typing a suite with a mistake")
	tb.must(save.Click(), "saving it")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=suite-error]")).ToContainText(`case 1 ("capital"): expect.regex is not a Go (RE2) regular expression`),
		"the sentence naming the case and the field")
	tb.must(tb.expect().Locator(editor).ToHaveValue(bad), "the text typed kept in the editor")

	// As many cases as a suite may have: a run that takes a second or
	// two of the tiny model's answers, so that its column is seen filling
	// in.
	var cases []string
	for i := 1; i <= 99; i++ {
		cases = append(cases, fmt.Sprintf(`{"name": "story %d", "prompt": "Tell story number %d.", "max_tokens": 256, "expect": {"regex": "\\S"}}`, i, i))
	}
	cases = append(cases, `{"name": "capital", "prompt": "What is the capital of France? One word.", "max_tokens": 8, "expect": {"exact": "Paris"}}`)
	tb.must(editor.Fill(`{"cases": [`+strings.Join(cases, ",\n")+`]}`), "typing the suite")
	tb.must(save.Click(), "saving it")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=notice]")).ToHaveText("The suite is saved: 100 cases."), "the suite saved")

	run := func(n int) string {
		t.Helper()
		tb.must(tb.page.GetByRole("button", playwright.PageGetByRoleOptions{Name: "Run now"}).Click(), "pressing Run now")
		heads := tb.loc("[data-testid=run-head]")
		tb.must(tb.expect().Locator(heads).ToHaveCount(n), "%d run columns", n)
		_, err := tb.page.Evaluate(`() => { window.__marker = 1 }`)
		tb.must(err, "marking the page")
		if state, _ := heads.Nth(n - 1).Locator("[data-testid=run-state]").InnerText(); !strings.Contains(state, "running") {
			t.Fatalf("run %d is %q on the page Run now led to; want it running, its column to fill in", n, state)
		}
		done := heads.Nth(n - 1).Locator("[data-testid=run-state]")
		tb.must(tb.expect().Locator(done).ToContainText("done", playwright.LocatorAssertionsToContainTextOptions{Timeout: playwright.Float(120000)}),
			"run %d done", n)
		marker, err := tb.page.Evaluate(`() => window.__marker`)
		tb.must(err, "reading the marker")
		if marker != 1 {
			t.Errorf("the page was loaded again while run %d ran: its column should fill in by itself", n)
		}
		score, err := heads.Nth(n - 1).Locator("[data-testid=run-score]").InnerText()
		tb.must(err, "reading run %d's score", n)
		if !regexp.MustCompile(`^\d+ of 100 passed$`).MatchString(score) {
			t.Errorf("run %d's score is %q", n, score)
		}
		return score
	}
	// The table's own requests: a GET of the page's path alone (the
	// pages the forms land on carry a query).
	polls := func() int {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		n := 0
		for _, r := range tb.requests {
			if r == "GET "+e.front.URL+page {
				n++
			}
		}
		return n
	}
	before := polls()
	first := run(1)
	if polls() == before {
		t.Errorf("the page did not ask for the runs' table again while the run ran")
	}
	if second := run(2); second != first {
		t.Errorf("the same suite run twice scored %q, then %q", first, second)
	}

	cells := tb.loc(`[data-testid=case-row][data-case="capital"] [data-testid=cell]`)
	tb.must(tb.expect().Locator(cells).ToHaveCount(2), "the capital case in both runs")
	var reasons []string
	for i := 0; i < 2; i++ {
		mark, err := cells.Nth(i).GetAttribute("data-mark")
		tb.must(err, "reading a cell's mark")
		reason, err := cells.Nth(i).Locator("[data-testid=reason]").InnerText()
		tb.must(err, "reading a cell's reason")
		if mark != "fail" || !strings.HasPrefix(reason, `the answer is not "Paris": `) {
			t.Errorf("run %d's capital case: %s, %q", i+1, mark, reason)
		}
		reasons = append(reasons, reason)
	}
	if len(reasons) == 2 && reasons[0] != reasons[1] {
		t.Errorf("the same suite run twice answered differently: %q, %q", reasons[0], reasons[1])
	}
	tb.screenshot("evals.png")
}

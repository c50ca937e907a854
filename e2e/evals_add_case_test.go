//go:build e2e

package e2e

import (
	"regexp"
	"testing"

	"github.com/playwright-community/playwright-go"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// TestEvalCaseAddedByForm: an operator who would rather not write JSON
// adds cases to a model's suite field by field. "The format" leads to
// where the suite's format is said; a case with a mistake comes back in
// the form with the sentence and what was typed; mended, it is saved, and
// the editor's JSON holds it; a second case goes after it.
func TestEvalCaseAddedByForm(t *testing.T) {
	e := setup(t)
	const repo = "acme/Chatty-GGUF"
	e.hub.AddRepo(repo, hubtest.RepoOptions{})
	e.hub.AddFile(repo, "Chatty-Q8_0.gguf", ggufgen.Bytes(ggufgen.Spec{}))
	model := e.srv.serveModel(map[string]any{"repo": repo, "replicas": 0}).Model

	tb := e.newTab(t)
	tb.open("/catalog/" + model + "/evals")
	tb.must(tb.loc("[data-testid=format-link]").Click(), "following the link to the format")
	tb.must(tb.expect().Page(tb.page).ToHaveURL(regexp.MustCompile(`#suite-format$`)), "at the format")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=suite-format]")).ToBeInViewport(), "the format in view")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=suite-format]")).ToContainText("exactly one of"), "the format described")

	form := tb.loc("[data-testid=add-case-form]")
	add := func(name, prompt, kind, expect string) {
		t.Helper()
		tb.must(form.GetByLabel("Name").Fill(name), "typing the case's name")
		tb.must(form.GetByLabel("Prompt").Fill(prompt), "typing the prompt")
		_, err := form.GetByLabel("The answer").SelectOption(playwright.SelectOptionValues{Values: &[]string{kind}})
		tb.must(err, "choosing what the answer is held to")
		tb.must(form.GetByLabel("Expected").Fill(expect), "typing what is expected")
		tb.must(form.GetByRole("button", playwright.LocatorGetByRoleOptions{Name: "Add the case"}).Click(), "pressing Add the case")
	}

	add("capital", "What is the capital of France? One word.", "regex", "(?i)paris(")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=add-case-error]")).ToContainText(`case 1 ("capital"): expect.regex is not a Go (RE2) regular expression`),
		"the sentence naming the case and the field")
	tb.must(tb.expect().Locator(form.GetByLabel("Name")).ToHaveValue("capital"), "the name typed kept")
	tb.must(tb.expect().Locator(form.GetByLabel("Expected")).ToHaveValue("(?i)paris("), "the pattern typed kept")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=suite-summary]")).ToContainText("No suite yet"), "nothing saved")

	tb.must(form.GetByLabel("Expected").Fill("(?i)paris"), "mending the pattern")
	tb.must(form.GetByRole("button", playwright.LocatorGetByRoleOptions{Name: "Add the case"}).Click(), "pressing Add the case")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=notice]")).ToHaveText("The suite is saved: 1 case."), "the case saved")
	editor := tb.page.GetByLabel("The suite, as JSON")
	tb.must(tb.expect().Locator(editor).ToHaveValue(regexp.MustCompile(`"name": "capital"[\s\S]*"regex": "\(\?i\)paris"`)), "the case in the suite's JSON")

	add("greeting", "Say hello.", "exact", "Hello")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=notice]")).ToHaveText("The suite is saved: 2 cases."), "the second case saved")
	tb.must(tb.expect().Locator(editor).ToHaveValue(regexp.MustCompile(`"capital"[\s\S]*"greeting"[\s\S]*"exact": "Hello"`)), "the second after the first")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=suite-summary]")).ToContainText("2 cases, saved by"), "the suite kept, and by whom")
}

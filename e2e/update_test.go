//go:build e2e

package e2e

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/playwright-community/playwright-go"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// TestAnUpdateTriedFromTheConsole: an operator sees a served model's
// branch move, tries the new weights beside it from the update's page,
// watches the job put them on trial, and promotes them by hand; the
// catalog then runs the new commit, with no canary left. From the model's
// version history, one click serves the version before again.
func TestAnUpdateTriedFromTheConsole(t *testing.T) {
	e := setup(t)
	const repo, file = "acme/Chatty-GGUF", "Chatty-Q8_0.gguf"
	e.hub.AddRepo(repo, hubtest.RepoOptions{})
	e.hub.AddFile(repo, file, ggufgen.Bytes(ggufgen.Spec{ContextLength: 2048}))
	model := e.srv.serveModel(map[string]any{"repo": repo, "replicas": 1}).Model
	moved := e.hub.AddFile(repo, file, ggufgen.Bytes(ggufgen.Spec{ContextLength: 4096}))

	tb := e.newTab(t)
	tb.open("/catalog")
	row := tb.loc(fmt.Sprintf("[data-testid=model-row][data-model=%q]", model))
	tb.must(row.Locator("[data-testid=model-more] > summary").Click(), "opening %s's details", model)
	tb.must(row.Locator("[data-testid=check-now]").Click(), "pressing Check now")
	tb.atPath("/updates/1", "on the update's page after the check")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=new-commit]")).ToHaveText(moved[:7]), "the update names the new commit")

	tb.must(tb.loc("[data-testid=try]").Click(), "pressing Try it")
	tb.must(tb.expect().Page(tb.page).ToHaveURL(regexp.MustCompile(`/jobs/update-[^/]+$`)), "on the update's job page")
	canary := tb.loc("[data-testid=step][data-step=canary]")
	tb.must(tb.expect().Locator(canary).ToHaveAttribute("data-state", "running", playwright.LocatorAssertionsToHaveAttributeOptions{
		Timeout: playwright.Float(float64(jobLimit.Milliseconds()))}), "the canary on trial, streamed to the page")
	tb.must(tb.expect().Locator(canary.Locator("[data-testid=detail]")).ToContainText("10% of "+model+"'s requests"), "the canary's share said")
	jobURL := tb.path()
	tb.screenshot("update-on-trial.png")

	tb.open("/updates/1")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=trial-job]")).ToHaveAttribute("href", jobURL), "the update page links the trial's job")
	tb.must(tb.loc("[data-testid=promote]").Click(), "pressing Promote it now")
	tb.atPath(jobURL, "back on the job's page after the promotion")
	if state := tb.waitEnded(jobLimit); state != "done" {
		t.Fatalf("the update's job ended %s", state)
	}
	tb.must(tb.expect().Locator(tb.loc("[data-testid=step][data-step=verdict] [data-testid=detail]")).
		ToContainText("promoted: "+model+" now serves "+moved[:7]), "the verdict on the page")
	// Said as promoted, leading to the model rather than the version's
	// trial name, which is gone.
	tb.must(tb.expect().Locator(tb.loc("[data-testid=outcome] [data-testid=promoted]")).ToContainText("Promoted."), "the job's outcome says promoted")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=outcome] [data-testid=model-link]")).ToHaveText("See "+model+" in the catalog"), "the outcome leads to the model")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=outcome] [data-testid=playground-link]")).ToHaveAttribute("href", "/catalog/"+model+"/playground"), "the model's playground")

	tb.open("/updates/1")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=state]")).ToHaveText("✓ promoted"), "the update page's state")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=note]")).ToContainText("Promoted: "+model+" runs "+moved[:7]+" now"), "the update page says what the model runs")

	tb.open("/catalog")
	tb.must(tb.expect().Locator(row.Locator("code").First()).ToHaveText(moved[:7]), "the catalog's model at the new commit")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=trial]")).ToHaveCount(0), "no canary left in the catalog")

	// One click away: the version before, served again from the model's
	// version history.
	tb.page.OnDialog(func(d playwright.Dialog) { _ = d.Accept() })
	tb.open("/catalog/" + model + "/versions")
	retired := tb.loc("[data-testid=version][data-state=retired]")
	tb.must(tb.expect().Locator(retired.Locator("[data-testid=version-reason]")).ToContainText("replaced by "+moved[:7]), "the retired version says why it ended")
	tb.must(retired.Locator("[data-testid=restore]").Click(), "pressing Serve again")
	tb.must(tb.expect().Page(tb.page).ToHaveURL(regexp.MustCompile(`/jobs/restore-[^/]+$`)), "on the restore's job page")
	if state := tb.waitEnded(jobLimit); state != "done" {
		t.Fatalf("the restore's job ended %s", state)
	}
	tb.must(tb.expect().Locator(tb.loc("[data-testid=outcome] [data-testid=restored]")).ToContainText("Served again."), "the restore's outcome")
	tb.open("/catalog/" + model + "/versions")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=version][data-state=retired]")).ToHaveAttribute("data-commit", moved),
		"the version promoted is retired, the one before current again")
}

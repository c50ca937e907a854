//go:build e2e

package e2e

import (
	"testing"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// TestScaleRefusedInline: a scale the catalog refuses (a most below the
// fewest) is said just after the model's scale form, the fleet page kept;
// a second refusal takes the place of the first.
func TestScaleRefusedInline(t *testing.T) {
	e := setup(t)
	const repo = "acme/Chatty-GGUF"
	e.hub.AddRepo(repo, hubtest.RepoOptions{})
	e.hub.AddFile(repo, "Chatty-Q8_0.gguf", ggufgen.Bytes(ggufgen.Spec{}))
	var job apiJob
	e.srv.api("POST", "/api/v1/serve", map[string]any{"repo": repo, "name": "chatty", "replicas": 0}, &job)
	if err := poll(jobLimit, func() bool {
		job = e.srv.job(job.ID)
		return job.State != "running"
	}); err != nil || job.State != "done" {
		t.Fatalf("serving chatty: %s %s", job.State, job.Error)
	}

	tb := e.newTab(t)
	tb.open("/fleet")
	form := tb.loc(`[data-model="chatty"] [data-testid=scale]`)
	refusal := tb.loc(`[data-testid=scale-error][data-model="chatty"]`)
	for _, most := range []string{"1", "2"} {
		tb.must(form.Locator("[data-testid=scale-min]").Fill("3"), "typing the fewest")
		tb.must(form.Locator("[data-testid=scale-max]").Fill(most), "typing the most")
		tb.must(form.Locator("[data-testid=scale-submit]").Click(), "pressing Scale")
		tb.must(tb.expect().Locator(refusal).ToContainText("fewer than the 3 it keeps"), "the refusal beside the form")
		tb.must(tb.expect().Locator(refusal).ToHaveCount(1), "one refusal, not one under another")
	}
	tb.atPath("/fleet", "still on the fleet page after a refused scale")
	tb.must(tb.expect().Locator(tb.page.GetByText("Not done")).ToHaveCount(0), "no Not done page")
}

//go:build e2e

package e2e

import (
	"regexp"
	"strings"
	"testing"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// TestGatedRepository: with no token, typing a gated repository's name
// says, in place on the serve page, what to do about it, and Serve is
// disabled with the reason beside it.
func TestGatedRepository(t *testing.T) {
	e := setup(t)
	const (
		repo = "acme/Gated-Llama-GGUF"
		set  = "Gated-Llama-Q8_0"
	)
	e.hub.AddRepo(repo, hubtest.RepoOptions{Gated: "manual"})
	e.hub.AddFile(repo, set+".gguf", ggufgen.Bytes(ggufgen.Spec{}))

	tb := e.newTab(t)
	tb.open("/serve")
	_, err := tb.page.Evaluate(`() => { window.__marker = 1 }`)
	tb.must(err, "setting the marker")
	tb.typeRepo(repo)

	alert := tb.loc("#repo-report [data-testid=alert]")
	tb.must(tb.expect().Locator(alert).ToBeVisible(), "a sentence about the gate below the repository")
	tb.must(tb.expect().Locator(alert).ToContainText("HF_TOKEN"), "the sentence names HF_TOKEN")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=gated]")).ToContainText("manual"), "the repository marked gated")
	text, _ := alert.InnerText()
	t.Logf("the serve page says: %s", text)
	tb.must(tb.expect().Page(tb.page).ToHaveURL("/serve"), "still on the serve page")
	marker, err := tb.page.Evaluate(`() => window.__marker`)
	tb.must(err, "reading the marker")
	if marker == nil {
		t.Error("the serve page was reloaded to show the sentence; want it in place")
	}
	tb.screenshot("gated.png")

	// Serve cannot be pressed into a job that would only stop at the
	// gate: it is disabled, and says why beside it.
	tb.must(tb.expect().Locator(tb.loc("[data-testid=serve-submit]")).ToBeDisabled(), "Serve disabled")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=serve-blocked]")).ToContainText("a token with access"), "the reason beside Serve")
}

// TestChecksumMismatchThenRetry: a file that arrives damaged fails the
// mirror step with the sentence that says so; once the registry serves it
// right, Retry finishes the job.
func TestChecksumMismatchThenRetry(t *testing.T) {
	e := setup(t)
	const (
		repo = "acme/Damaged-Llama-GGUF"
		set  = "Damaged-Llama-Q8_0"
		file = set + ".gguf"
	)
	e.hub.AddRepo(repo, hubtest.RepoOptions{})
	model := ggufgen.Bytes(ggufgen.Spec{})
	e.hub.AddFile(repo, file, model)
	// A byte of the weights, past the header the serve page reads.
	e.hub.FlipByte(repo, file, int64(len(model)-100))

	tb := e.newTab(t)
	first := tb.serve(repo, set, "")
	if state := tb.waitEnded(jobLimit); state != "failed" {
		t.Fatalf("the job of a damaged file ended %s", state)
	}
	tb.showsTruth(first)
	if got := tb.stepState("mirror"); got != "failed" {
		t.Errorf("the mirror step shows %q; want failed", got)
	}
	outcome := tb.loc("[data-testid=outcome]")
	tb.must(tb.expect().Locator(outcome).ToContainText("mirror"), "the outcome names the mirror step")
	sentence := tb.loc("[data-testid=outcome] [data-testid=error]")
	tb.must(tb.expect().Locator(sentence).ToContainText(regexp.MustCompile(`arrived with sha256 [0-9a-f]{12,64}, and the registry published [0-9a-f]{12,64}`)),
		"the checksum sentence")
	text, _ := sentence.InnerText()
	t.Logf("the job page says: %s", text)
	for _, later := range []string{"check", "catalog", "placement", "smoke test"} {
		if got := tb.stepState(later); got == "done" || got == "running" {
			t.Errorf("the %s step shows %s after the mirror failed", later, got)
		}
	}
	tb.screenshot("checksum.png")

	e.hub.ClearFaults(repo, file)
	tb.must(tb.loc("[data-testid=retry]").Click(), "pressing Retry")
	tb.must(tb.expect().Page(tb.page).ToHaveURL(regexp.MustCompile(`/jobs/[^/]+$`)), "on a job page after Retry")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=job-id]")).Not().ToHaveText(first), "a new job after Retry")
	tb.must(tb.expect().Locator(tb.loc(`[data-testid=job] a[href="/jobs/`+first+`"]`)).ToBeVisible(), "the retry links the job it retries")
	if state := tb.waitEnded(jobLimit); state != "done" {
		msg, _ := tb.loc("[data-testid=outcome]").InnerText()
		t.Fatalf("the retried job ended %s: %s", state, msg)
	}
	if got := tb.stepState("mirror"); got != "done" {
		t.Errorf("the retried job's mirror step shows %q", got)
	}
	reply, _ := tb.loc("[data-testid=outcome] [data-testid=reply]").InnerText()
	if strings.TrimSpace(reply) == "" {
		t.Error("the retried job shows no reply")
	}
}

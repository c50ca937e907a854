//go:build e2e

package e2e

import (
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/playwright-community/playwright-go"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// replyRecorder counts, from inside the page, the reply's swaps as its
// stream's events arrive, and sets a marker a reload would wipe.
const replyRecorder = `() => {
	window.__marker = 1;
	window.__swaps = [];
	document.body.addEventListener('htmx:sseMessage', e => {
		window.__swaps.push(e.detail.type + ' ' + (document.querySelector('[data-testid=turn][data-role=assistant]:last-child [data-testid=reply-text]') || {textContent: ''}).textContent.length);
	});
}`

// TestPlayground: a model served by a job is tried by hand. From the job
// page the operator finds how to call it and its playground; there a
// message's reply streams into the page and ends with its tokens per
// second; the curl command the page gives really answers; and the catalog
// shows the model's requests and latency. On a phone-sized window nothing
// runs off the side.
func TestPlayground(t *testing.T) {
	e := setup(t)
	const repo = "acme/Chatty-GGUF"
	e.hub.AddRepo(repo, hubtest.RepoOptions{})
	e.hub.AddFile(repo, "Chatty-Q8_0.gguf", ggufgen.Bytes(ggufgen.Spec{ContextLength: 2048}))
	// Served by a script: the serve form is TestServeAModel's.
	job := e.srv.serveModel(map[string]any{"repo": repo, "replicas": 1})
	model := job.Model

	// The job page: how to call the model, and the way to its playground.
	tb := e.newTab(t)
	tb.open("/jobs/" + job.ID)
	panel := tb.loc("[data-testid=call-it][data-model=" + strconv.Quote(model) + "]")
	tb.must(tb.expect().Locator(panel.Locator("[data-testid=call-curl]")).ToContainText(`"model": "`+model+`"`), "the job page's curl command names %s", model)
	tb.must(tb.loc("[data-testid=outcome] [data-testid=playground-link]").Click(), "following the link to the playground")
	playground := "/catalog/" + model + "/playground"
	tb.atPath(playground, "on %s's playground", model)

	// A message, sent as a person would.
	_, err := tb.page.Evaluate(replyRecorder)
	tb.must(err, "starting the recorder")
	tb.must(tb.page.GetByLabel("Message").Fill("Say hello."), "typing the message")
	tb.must(tb.page.GetByLabel("Max tokens").Fill("48"), "setting max tokens")
	tb.must(tb.page.GetByLabel("Temperature").Fill("0"), "setting the temperature")
	tb.must(tb.page.GetByRole("button", playwright.PageGetByRoleOptions{Name: "Send"}).Click(), "pressing Send")

	user := tb.loc("[data-testid=turn][data-role=user] [data-testid=turn-text]")
	tb.must(tb.expect().Locator(user).ToHaveText("Say hello."), "the message in the conversation")
	reply := tb.loc("[data-testid=turn][data-role=assistant] [data-testid=reply][data-done=true]")
	tb.must(reply.WaitFor(playwright.LocatorWaitForOptions{Timeout: playwright.Float(60000)}), "the reply's end")
	text, err := reply.Locator("[data-testid=reply-text]").InnerText()
	tb.must(err, "reading the reply")
	if strings.TrimSpace(text) == "" {
		t.Error("the reply is empty")
	}
	tps, err := reply.Locator("[data-testid=reply-tps]").InnerText()
	tb.must(err, "reading tokens per second")
	if v, err := strconv.ParseFloat(strings.TrimSpace(tps), 64); err != nil || v <= 0 {
		t.Errorf("tokens per second shows %q; want a positive number", tps)
	}
	tb.must(tb.expect().Locator(tb.loc("#playground-status")).ToContainText("Reply done: "), "the status line announces the end")
	tb.must(tb.expect().Locator(tb.page.GetByLabel("Message")).ToHaveValue(""), "the message field emptied for the next")
	raw, err := tb.page.Evaluate(`() => JSON.stringify({marker: window.__marker, swaps: window.__swaps})`)
	tb.must(err, "reading the recorder")
	if !strings.Contains(raw.(string), `"marker":1`) {
		t.Error("the page was reloaded to show the reply: the marker set before sending is gone")
	}
	if !strings.Contains(raw.(string), `"end `) {
		t.Errorf("the reply did not come by its stream's end event: %s", raw)
	}
	if tb.requestsTo(playground+"/stream?ask=") != 1 {
		t.Errorf("the page asked for the reply's stream %d times; want once", tb.requestsTo(playground+"/stream?ask="))
	}
	t.Logf("%s answered %q at %s tokens/s; the reply's events, with its length at each: %s", model, text, tps, raw)

	// A second message goes with the conversation so far, sent from the
	// keyboard.
	tb.must(tb.page.GetByLabel("Message").Fill("Again."), "typing the second message")
	tb.must(tb.page.GetByLabel("Message").Press("Control+Enter"), "sending it with Ctrl+Enter")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=turn][data-role=assistant] [data-testid=reply][data-done=true]")).ToHaveCount(2, playwright.LocatorAssertionsToHaveCountOptions{Timeout: playwright.Float(60000)}), "the second reply's end")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=turn]")).ToHaveCount(4), "two messages and two replies")
	tb.screenshot("playground.png")

	// The call-it panel, with the address the browser used; its curl
	// command, run as written with a token, answers.
	curl, err := tb.loc("[data-testid=call-it] [data-testid=call-curl]").InnerText()
	tb.must(err, "reading the curl command")
	// Its Copy button puts it on the clipboard, whole.
	tb.must(tb.page.Context().GrantPermissions([]string{"clipboard-read", "clipboard-write"}), "letting the page use the clipboard")
	copyCurl := tb.loc("[data-testid=call-it] pre:has([data-testid=call-curl]) [data-testid=copy]")
	tb.must(copyCurl.Click(), "pressing Copy beside the curl command")
	tb.must(tb.expect().Locator(copyCurl).ToHaveText("Copied"), "the button saying it copied")
	copied, err := tb.page.Evaluate(`() => navigator.clipboard.readText()`)
	tb.must(err, "reading the clipboard")
	if strings.TrimSpace(copied.(string)) != strings.TrimSpace(curl) {
		t.Errorf("the clipboard holds %q, not the curl command %q", copied, curl)
	}
	for _, want := range []string{"curl " + e.front.URL + "/v1/chat/completions", `"model": "` + model + `"`, "$MODELSERVE_TOKEN"} {
		if !strings.Contains(curl, want) {
			t.Errorf("the curl command has no %q:\n%s", want, curl)
		}
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Errorf("curl is not installed, so the panel's command cannot be tried: %v", err)
	} else {
		cmd := exec.Command("sh", "-c", curl+" --silent --show-error --fail-with-body --max-time 60")
		cmd.Env = []string{"MODELSERVE_TOKEN=" + e.srv.token, "PATH=/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"chat.completion"`) {
			t.Errorf("the panel's curl command: %v\n%s", err, out)
		}
	}

	// The catalog: the model's requests in the last minute (the job's
	// smoke test, the two messages and the curl) and their median latency.
	tb.open("/catalog")
	row := tb.loc("[data-testid=model-row][data-model=" + strconv.Quote(model) + "]")
	tb.must(tb.expect().Locator(row.Locator("[data-testid=requests]")).ToHaveText(regexp.MustCompile(`^([3-9]|\d\d+) requests$`)), "%s's requests in the catalog", model)
	tb.must(tb.expect().Locator(row.Locator("[data-testid=latency]")).ToHaveText(regexp.MustCompile(`^\d+(\.\d)? (ms|s)$`)), "%s's latency in the catalog", model)
	tb.must(tb.expect().Locator(tb.loc("[data-testid=call-it][data-model="+strconv.Quote(model)+"] [data-testid=call-curl]")).ToContainText(model), "the catalog's curl command for %s", model)

	tb.screenshot("catalog.png")

	// At 375 px the playground and its panel fit the width.
	tb.must(tb.page.SetViewportSize(375, 800), "narrowing the window")
	tb.open(playground)
	width, err := tb.page.Evaluate(`() => document.documentElement.scrollWidth`)
	tb.must(err, "measuring the page")
	if w := toFloat(width); w > 375 {
		t.Errorf("at 375 px the playground is %v px wide: something runs off the side", w)
	}
	tb.screenshot("playground-375.png")
}

//go:build e2e

package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// waitingRecorder keeps, from inside the page, every text the reply to
// come says while it waits: the cold start's "Loading chatty…" is there for
// as long as the engine takes to load, which may be a fraction of a
// second, so it is recorded as it appears rather than looked for after.
const waitingRecorder = `() => {
	window.__waiting = [];
	const note = () => document.querySelectorAll('[data-testid=reply-waiting]').forEach(el => {
		const t = el.textContent.trim();
		if (window.__waiting[window.__waiting.length - 1] !== t) window.__waiting.push(t);
	});
	new MutationObserver(note).observe(document.body, {childList: true, subtree: true, characterData: true});
	window.__stream = [];
	for (const name of ['htmx:sseOpen', 'htmx:sseMessage', 'htmx:sseClose', 'htmx:sseError']) {
		document.addEventListener(name, e => window.__stream.push(name + (e.detail && e.detail.type ? ' ' + e.detail.type : '')));
	}
}`

// sendAndRecord sends message from the playground open in tb (with
// waitingRecorder started), waits for the reply's end, and gives the
// ended reply and what it said while it waited.
func sendAndRecord(t *testing.T, tb *tab, message string, maxTokens int) (playwright.Locator, []any) {
	t.Helper()
	tb.must(tb.page.GetByLabel("Message").Fill(message), "typing the message")
	tb.must(tb.page.GetByLabel("Max tokens").Fill(strconv.Itoa(maxTokens)), "setting max tokens")
	// Greedy, so the tiny model writes the same reply each run: sampled,
	// its first token is now and then its end, a reply with no text and no
	// figures to read.
	tb.must(tb.page.GetByLabel("Temperature").Fill("0"), "setting the temperature")
	tb.must(tb.page.GetByRole("button", playwright.PageGetByRoleOptions{Name: "Send"}).Click(), "pressing Send")
	reply := tb.loc("[data-testid=turn][data-role=assistant] [data-testid=reply][data-done=true]")
	if err := reply.WaitFor(playwright.LocatorWaitForOptions{Timeout: playwright.Float(60000)}); err != nil {
		// What the page had of the reply, and what its stream did, say
		// whether the end never came or came and was not shown.
		turn, _ := tb.loc("[data-testid=turn][data-role=assistant]").Last().InnerHTML()
		events, _ := tb.page.Evaluate(`() => window.__stream`)
		t.Fatalf("the reply's end: %v\nthe reply as the page has it: %s\nits stream's events: %v", err, turn, events)
	}
	if n, _ := reply.Locator("[data-testid=reply-error]").Count(); n > 0 {
		msg, _ := reply.Locator("[data-testid=reply-error]").InnerText()
		t.Fatalf("the reply failed: %s", msg)
	}
	seen, err := tb.page.Evaluate(`() => window.__waiting`)
	tb.must(err, "reading what the reply said while it waited")
	said, _ := seen.([]any)
	return reply, said
}

// TestPlaygroundSaysLoadingOnAColdStart: a model loaded on demand, with no
// replica running, is sent a message from its playground:
// the reply says "Loading <model>…" while the engine starts, and then the
// reply comes.
func TestPlaygroundSaysLoadingOnAColdStart(t *testing.T) {
	e := setup(t)
	const repo = "acme/Chatty-GGUF"
	e.hub.AddRepo(repo, hubtest.RepoOptions{})
	e.hub.AddFile(repo, "Chatty-Q8_0.gguf", ggufgen.Bytes(ggufgen.Spec{}))
	model := e.srv.serveModel(map[string]any{"repo": repo, "replicas": 0, "idle_after": "1s"}).Model
	// Served on demand, it runs no replica until asked (or a second after
	// a smoke test's).
	if err := poll(time.Minute, func() bool {
		var fl struct{ Replicas []struct{ Model string } }
		e.srv.api("GET", "/api/v1/replicas", nil, &fl)
		return len(fl.Replicas) == 0
	}); err != nil {
		t.Fatalf("%s's replica was not stopped once idle: %v", model, err)
	}

	tb := e.newTab(t)
	tb.open("/catalog/" + model + "/playground")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=loads-on-first]")).ToContainText(model+" is not loaded now: the first message loads it"),
		"the page says the first message loads the model")
	_, err := tb.page.Evaluate(waitingRecorder)
	tb.must(err, "starting the recorder")
	_, said := sendAndRecord(t, tb, "Say hello.", 8)
	if len(said) == 0 || !strings.HasPrefix(said[0].(string), "Loading "+model+"…") {
		t.Errorf("while the model started the reply said %q; want first \"Loading %s…\"", said, model)
	}
	if n, _ := tb.loc("[data-testid=reply-waiting]").Count(); n != 0 {
		t.Error("the reply still says it waits once it has come")
	}
	// The heading follows the model: loaded by the message, it no longer
	// says it is not.
	tb.must(tb.expect().Locator(tb.loc("[data-testid=loads-on-first]")).ToHaveCount(0), "the heading no longer saying the model is not loaded")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=playground-running]")).ToContainText("1 of"), "the heading saying its replica runs")
}

// TestPlaygroundSaysItWaitsForRoom: on a machine with room for one model,
// alpha has just loaded and keeps its room for its residency; a message
// to beta from its playground says it waits for room and why, as the
// fleet says it, rather than "Loading beta…"; once alpha gives the room
// back, beta loads and answers, its tokens per second counted over the
// writing, not the wait.
func TestPlaygroundSaysItWaitsForRoom(t *testing.T) {
	e := setup(t, "--local-memory", "300MB", "--residency", "8s")
	for _, name := range []string{"alpha", "beta"} {
		repo := "acme/" + name + "-GGUF"
		e.hub.AddRepo(repo, hubtest.RepoOptions{})
		e.hub.AddFile(repo, name+"-Q8_0.gguf", ggufgen.Bytes(ggufgen.Spec{ContextLength: 2048}))
		var job apiJob
		e.srv.api("POST", "/api/v1/serve", map[string]any{"repo": repo, "name": name, "replicas": 0, "idle_after": "1s"}, &job)
		if err := poll(jobLimit, func() bool {
			job = e.srv.job(job.ID)
			return job.State != "running"
		}); err != nil || job.State != "done" {
			t.Fatalf("serving %s: %s %s", name, job.State, job.Error)
		}
	}
	if err := poll(time.Minute, func() bool {
		var fl struct{ Replicas []struct{ Model string } }
		e.srv.api("GET", "/api/v1/replicas", nil, &fl)
		return len(fl.Replicas) == 0
	}); err != nil {
		t.Fatalf("the smoke tests' replicas were not stopped once idle: %v", err)
	}
	tb := e.newTab(t)
	tb.open("/catalog/beta/playground")
	_, err := tb.page.Evaluate(waitingRecorder)
	tb.must(err, "starting the recorder")
	// alpha stays once idle, and is asked for just before beta: loaded,
	// it keeps its room for its residency.
	e.srv.api("POST", "/api/v1/catalog/alpha/scale", map[string]any{"min": 0, "max": 1, "idle_after": "10m"}, nil)
	e.srv.api("POST", "/v1/chat/completions", map[string]any{"model": "alpha", "max_tokens": 4,
		"messages": []map[string]string{{"role": "user", "content": "Hi"}}}, nil)
	reply, said := sendAndRecord(t, tb, "Say hello.", 16)
	// It says it waits for the room alpha-1 keeps, and never that it waits
	// once it has said it loads. (The tiny model may load between two of
	// the page's looks, so its "Loading beta…" after the wait may go
	// unseen; before the fleet's first look at beta it says it loads.)
	room, waitedAfterLoad := -1, false
	loaded := false
	for i, x := range said {
		text, _ := x.(string)
		waiting := strings.HasPrefix(text, "Waiting for room on node ")
		if room < 0 && waiting && strings.Contains(text, ": alpha-1 is kept ") {
			room = i
		}
		if room >= 0 && strings.HasPrefix(text, "Loading beta…") {
			loaded = true
		}
		if loaded && waiting {
			waitedAfterLoad = true
		}
	}
	if room < 0 || waitedAfterLoad {
		t.Errorf("while alpha kept its room the reply said %q; want that it waits for the room alpha-1 keeps, and not again once beta loads", said)
	}
	// The wait (most of alpha's 8 s of residency) is in the first
	// token's time, not in the time the reply was written over.
	tokens, _ := reply.Locator("[data-testid=reply-tokens]").InnerText()
	stats, _ := reply.Locator(".reply-stats").InnerText()
	var n int
	var over float64
	var unit string
	_, err = fmt.Sscanf(tokens, "%d tokens in %f %s", &n, &over, &unit)
	if unit == "ms" {
		over /= 1000
	}
	if err != nil || over >= 3 || !strings.Contains(stats, "first token after") {
		t.Errorf("the reply's figures read %q: want the tokens written over less than the wait, which the first token's time holds", stats)
	}
}

package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"modelserve/catalog"
	"modelserve/handlers"
	"modelserve/internal/fleet"
	"modelserve/internal/gateway"
	"modelserve/internal/operr"
	"modelserve/jobs"
)

// fakeGateway is the gateway as the console calls it: AskStream answers
// with the chunks a test gives, as llama.cpp streams them, and keeps the
// bodies it was sent. The /v1/ routes are not the console's business here.
type fakeGateway struct {
	mu      sync.Mutex
	bodies  []map[string]any
	chunks  []string
	err     error
	traffic map[string]gateway.Traffic
	// state is what State says of every model: loaded unless set.
	state string
	// hold, when set, is waited on before the chunks: a model loading;
	// stopped is closed when the call is cancelled while held.
	hold, stopped chan struct{}
	// gap is the time between two chunks, as a model writing.
	gap time.Duration
}

func (f *fakeGateway) ListModels(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusTeapot)
}
func (f *fakeGateway) ShowModel(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusTeapot)
}
func (f *fakeGateway) Forward(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusTeapot)
}
func (f *fakeGateway) NotFound(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusTeapot)
}
func (f *fakeGateway) Traffic() map[string]gateway.Traffic { return f.traffic }
func (f *fakeGateway) State(model string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state != "" {
		return f.state
	}
	return gateway.Loaded
}

func (f *fakeGateway) AskStream(ctx context.Context, route string, body []byte, each func([]byte) error) error {
	var b map[string]any
	if err := json.Unmarshal(body, &b); err != nil {
		return err
	}
	b["_route"] = route
	f.mu.Lock()
	f.bodies = append(f.bodies, b)
	chunks, err, hold, stopped := f.chunks, f.err, f.hold, f.stopped
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			close(stopped)
			return ctx.Err()
		}
	}
	if err != nil {
		return err
	}
	for i, c := range chunks {
		if i > 0 && f.gap > 0 {
			time.Sleep(f.gap)
		}
		if err := each([]byte(c)); err != nil {
			return err
		}
	}
	return ctx.Err()
}

func (f *fakeGateway) sent() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bodies
}

// chatChunks are a streamed reply of words, then the usage chunk.
func chatChunks(words ...string) []string {
	var out []string
	for _, w := range words {
		b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]string{"content": w}}}})
		out = append(out, string(b))
	}
	return append(out, `{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":`+itoa(len(words))+`,"total_tokens":12}}`)
}

// messages are a call's messages as JSON, role first.
func messages(call map[string]any) string {
	var msgs []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	b, _ := json.Marshal(call["messages"])
	json.Unmarshal(b, &msgs)
	out, _ := json.Marshal(msgs)
	return string(out)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// newPlaygroundEnv is a console with a gateway, a chat model "tiny" and an
// embedding model "embed" in its catalog.
func newPlaygroundEnv(t *testing.T, gw *fakeGateway, edit ...func(*handlers.Deps)) *consoleEnv {
	t.Helper()
	e := newConsoleEnv(t, append([]func(*handlers.Deps){func(d *handlers.Deps) { d.Gateway = gw }}, edit...)...)
	ctx := context.Background()
	embed := tinyModel("embed")
	embed.Aliases = nil
	embed.Capabilities = catalog.Capabilities{Embeddings: true}
	for _, m := range []catalog.Model{tinyModel("tiny"), embed} {
		if err := e.catalog.Add(ctx, m, "test"); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// playgroundForm is the page's form, filled in as a person would, with
// the hidden fields of the conversation the page holds.
func playgroundForm(doc *goquery.Document, message string) url.Values {
	form := url.Values{}
	doc.Find(`#playground-form input, input[form="playground-form"]`).Each(func(_ int, s *goquery.Selection) {
		if name, ok := s.Attr("name"); ok {
			form.Add(name, s.AttrOr("value", ""))
		}
	})
	doc.Find(`#playground-form textarea`).Each(func(_ int, s *goquery.Selection) {
		form.Set(s.AttrOr("name", ""), s.Text())
	})
	form.Set("message", message)
	return form
}

func TestPlaygroundPage(t *testing.T) {
	gw := &fakeGateway{}
	e := newPlaygroundEnv(t, gw)
	b := e.signedIn()
	doc := mustStatus(t, b.get("/catalog/tiny/playground"), http.StatusOK)

	form := doc.Find(`form#playground-form`)
	if form.AttrOr("method", "") != "post" || form.AttrOr("action", "") != "/catalog/tiny/playground" ||
		form.AttrOr("hx-post", "") != "/catalog/tiny/playground" {
		t.Errorf("the form posts to %q (hx-post %q)", form.AttrOr("action", ""), form.AttrOr("hx-post", ""))
	}
	if got := form.Find(`input[name="csrf"]`).AttrOr("value", ""); got != b.csrf {
		t.Errorf("the form's CSRF token %q, want the session's", got)
	}
	// Every field has a label a screen reader reads.
	for _, name := range []string{"message", "max_tokens", "temperature", "system"} {
		field := form.Find(`[name="` + name + `"]`)
		id := field.AttrOr("id", "")
		labelled := field.ParentsFiltered("label").Length() > 0 || (id != "" && doc.Find(`label[for="`+id+`"]`).Length() > 0)
		if field.Length() != 1 || !labelled {
			t.Errorf("field %s: %d found, labelled %v", name, field.Length(), labelled)
		}
	}
	if got := form.Find(`[name="max_tokens"]`); got.AttrOr("value", "") != "256" || got.AttrOr("max", "") != "4096" {
		t.Errorf("max tokens %q up to %q; want 256 up to the context, 4096", got.AttrOr("value", ""), got.AttrOr("max", ""))
	}
	if got := form.Find(`[name="temperature"]`).AttrOr("value", ""); got != "0.7" {
		t.Errorf("temperature %q", got)
	}
	// The end of a reply is announced, the reply itself is not at each token.
	if doc.Find(`#playground-status[role="status"]`).Length() != 1 {
		t.Error("no status line for the reply's end")
	}
	if doc.Find(`#turns[aria-live], #turns [aria-live]`).Length() != 0 {
		t.Error("the conversation is a live region: every token would be read out")
	}
	callIt(t, doc, "tiny", e.srv.URL)
}

// callIt checks a page's "call it" panel for model, called at base.
func callIt(t *testing.T, doc *goquery.Document, model, base string) {
	t.Helper()
	panel := doc.Find(`[data-testid="call-it"][data-model="` + model + `"]`)
	if panel.Length() != 1 {
		t.Fatalf("%d call-it panels for %s", panel.Length(), model)
	}
	route, field := "/chat/completions", `"messages"`
	if model == "embed" {
		route, field = "/embeddings", `"input"`
	}
	curl := panel.Find(`[data-testid="call-curl"]`).Text()
	for _, want := range []string{"curl " + base + "/v1" + route, `Authorization: Bearer $MODELSERVE_TOKEN`, `"model": "` + model + `"`, field} {
		if !strings.Contains(curl, want) {
			t.Errorf("%s's curl command has no %q:\n%s", model, want, curl)
		}
	}
	py := panel.Find(`[data-testid="call-python"]`).Text()
	for _, want := range []string{"from openai import OpenAI", `base_url="` + base + `/v1"`, `os.environ["MODELSERVE_TOKEN"]`, `model="` + model + `"`} {
		if !strings.Contains(py, want) {
			t.Errorf("%s's Python has no %q:\n%s", model, want, py)
		}
	}
	js := panel.Find(`[data-testid="call-javascript"]`).Text()
	for _, want := range []string{`import OpenAI from "openai"`, `baseURL: "` + base + `/v1"`, "process.env.MODELSERVE_TOKEN", `model: "` + model + `"`} {
		if !strings.Contains(js, want) {
			t.Errorf("%s's JavaScript has no %q:\n%s", model, want, js)
		}
	}
	if got := panel.Find(`[data-testid="call-token"]`).Text(); !strings.Contains(got, "modelserve token create --models "+model) {
		t.Errorf("the panel's token command is %q", got)
	}
}

// TestPlaygroundSaysAReplyHadNoText: a model whose first token is its end
// answers with no text; the ended reply says so where the reply goes, not
// an empty box the page shows nothing of.
func TestPlaygroundSaysAReplyHadNoText(t *testing.T) {
	gw := &fakeGateway{chunks: chatChunks()}
	e := newPlaygroundEnv(t, gw)
	b := e.signedIn()
	page := mustStatus(t, b.get("/catalog/tiny/playground"), http.StatusOK)
	sent := mustStatus(t, b.do(http.MethodPost, "/catalog/tiny/playground", playgroundForm(page, "Say hello."), htmx), http.StatusOK)
	resp := b.get(sent.Find(`[data-role="assistant"][sse-connect]`).AttrOr("sse-connect", ""))
	defer resp.Body.Close()
	var last sseEvent
	for ev := range readEvents(t, resp.Body) {
		last = ev
	}
	end, _ := goquery.NewDocumentFromReader(strings.NewReader(last.data))
	if last.name != "end" || end.Find(`[data-testid="reply"]`).AttrOr("data-done", "") != "true" {
		t.Fatalf("the stream ended on %q: %s", last.name, last.data)
	}
	if got := end.Find(`[data-testid="reply-empty"]`).Text(); !strings.Contains(got, "without writing any text") {
		t.Errorf("the ended reply with no text reads %q, want it to say the model wrote none", end.Find(`[data-testid="reply"]`).Text())
	}
	if got := end.Find(`#playground-status`).Text(); got != "Reply done, with no text." {
		t.Errorf("the status line reads %q", got)
	}
}

// TestPlaygroundStreamsAReply is a message sent from the page: the message
// and a reply that follows its stream come back; the stream grows the
// reply and ends with it whole, its tokens per second and the status line.
// The next message carries the conversation so far.
func TestPlaygroundStreamsAReply(t *testing.T) {
	// A gap between chunks, so the reply is seen growing before its end.
	gw := &fakeGateway{chunks: chatChunks("Hello", " there", "!"), gap: 20 * time.Millisecond}
	e := newPlaygroundEnv(t, gw)
	b := e.signedIn()
	page := mustStatus(t, b.get("/catalog/tiny/playground"), http.StatusOK)

	form := playgroundForm(page, "Say hello.")
	form.Set("max_tokens", "32")
	form.Set("temperature", "0")
	form.Set("system", "You are terse.")
	resp := b.do(http.MethodPost, "/catalog/tiny/playground", form, htmx)
	sent := mustStatus(t, resp, http.StatusOK)
	if got := sent.Find(`[data-role="user"] [data-testid="turn-text"]`).Text(); got != "Say hello." {
		t.Errorf("the message shown is %q", got)
	}
	reply := sent.Find(`[data-role="assistant"][sse-connect]`)
	stream := reply.AttrOr("sse-connect", "")
	if !strings.HasPrefix(stream, "/catalog/tiny/playground/stream?ask=") || reply.AttrOr("sse-close", "") != "end" {
		t.Fatalf("the reply follows %q (closing on %q)", stream, reply.AttrOr("sse-close", ""))
	}
	if reply.Find(`[sse-swap]`).AttrOr("sse-swap", "") != "reply,end" {
		t.Error("the reply is not swapped by the stream's events")
	}
	// The form comes back empty of the message, keeping its parameters.
	again := sent.Find(`form#playground-form[hx-swap-oob]`)
	if again.Find(`[name="message"]`).Text() != "" || again.Find(`[name="max_tokens"]`).AttrOr("value", "") != "32" {
		t.Errorf("the form sent back: message %q, max tokens %q", again.Find(`[name="message"]`).Text(), again.Find(`[name="max_tokens"]`).AttrOr("value", ""))
	}
	if len(gw.sent()) != 0 {
		t.Fatal("the model was called before the page asked for the reply")
	}

	resp = b.get(stream)
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var last sseEvent
	grew := 0
	for ev := range readEvents(t, resp.Body) {
		last = ev
		if ev.name == "reply" {
			grew++
		}
	}
	if grew == 0 || last.name != "end" {
		t.Fatalf("%d reply events, then %q; want the reply growing, then end", grew, last.name)
	}
	end, _ := goquery.NewDocumentFromReader(strings.NewReader(last.data))
	if got := end.Find(`[data-testid="reply-text"]`).Text(); got != "Hello there!" {
		t.Errorf("the reply reads %q", got)
	}
	if got := end.Find(`[data-testid="reply"]`).AttrOr("aria-busy", ""); got != "false" {
		t.Errorf("the ended reply is aria-busy=%q", got)
	}
	tps := end.Find(`[data-testid="reply-tps"]`).Text()
	if tps == "" || tps == "0.0" {
		t.Errorf("tokens per second %q", tps)
	}
	if got := end.Find(`[data-testid="reply-tokens"]`).Text(); !strings.HasPrefix(got, "3 tokens in ") {
		t.Errorf("the reply's tokens read %q", got)
	}
	status := end.Find(`#playground-status`)
	if status.AttrOr("hx-swap-oob", "") != "innerHTML" || !strings.Contains(status.Text(), "Reply done: 3 tokens") {
		t.Errorf("the end's status line %q (swap %q)", status.Text(), status.AttrOr("hx-swap-oob", ""))
	}

	got := gw.sent()
	if len(got) != 1 {
		t.Fatalf("%d calls to the model", len(got))
	}
	call := got[0]
	if call["_route"] != "/v1/chat/completions" || call["model"] != "tiny" || call["stream"] != true ||
		call["max_tokens"] != 32.0 || call["temperature"] != 0.0 {
		t.Errorf("the call: %v", call)
	}
	if msgs := messages(call); msgs != `[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello."}]` {
		t.Errorf("messages %s", msgs)
	}

	// The next message carries the conversation: the page now holds the
	// message's and the reply's hidden fields.
	var html strings.Builder
	html.WriteString(`<html><body>`)
	h, _ := sent.Find(`[data-role="user"]`).Parent().Html()
	html.WriteString(`<ol id="turns">` + h + `</ol>`)
	endHTML, _ := end.Find("body").Html()
	html.WriteString(`<div>` + endHTML + `</div>`)
	formHTML, _ := goquery.OuterHtml(again)
	html.WriteString(formHTML + `</body></html>`)
	pageNow, _ := goquery.NewDocumentFromReader(strings.NewReader(html.String()))
	next := playgroundForm(pageNow, "And goodbye?")
	resp = b.do(http.MethodPost, "/catalog/tiny/playground", next, htmx)
	stream = mustStatus(t, resp, http.StatusOK).Find(`[sse-connect]`).AttrOr("sse-connect", "")
	for range readEvents(t, b.get(stream).Body) {
	}
	got = gw.sent()
	if len(got) != 2 {
		t.Fatalf("%d calls to the model", len(got))
	}
	if msgs := messages(got[1]); msgs != `[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello."},{"role":"assistant","content":"Hello there!"},{"role":"user","content":"And goodbye?"}]` {
		t.Errorf("the second message's conversation %s", msgs)
	}

	// A reply is streamed once: the same stream again says it is gone.
	events := readEvents(t, b.get(stream).Body)
	ev := nextEvent(t, events)
	if ev.name != "end" || !strings.Contains(ev.data, "send the message again") {
		t.Errorf("the stream asked again: %q %q", ev.name, ev.data)
	}
}

// TestPlaygroundRefusals: a form without the session's token is refused,
// someone else's reply cannot be read, and what is wrong with the form is
// said beside the field, the form in place of the form.
func TestPlaygroundRefusals(t *testing.T) {
	gw := &fakeGateway{chunks: chatChunks("Hi")}
	e := newPlaygroundEnv(t, gw)
	b := e.signedIn()

	form := url.Values{"message": {"Hello"}, "csrf": {"forged"}}
	if resp := b.do(http.MethodPost, "/catalog/tiny/playground", form, htmx); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a form without the session's token: %s", resp.Status)
	}

	form = url.Values{"message": {""}, "max_tokens": {"0"}, "temperature": {"3"}, "csrf": {b.csrf}}
	resp := b.do(http.MethodPost, "/catalog/tiny/playground", form, htmx)
	if resp.Header.Get("HX-Retarget") != "#playground-form" || resp.Header.Get("HX-Reswap") != "outerHTML" {
		t.Errorf("the form's errors go to %q (%q)", resp.Header.Get("HX-Retarget"), resp.Header.Get("HX-Reswap"))
	}
	doc := mustStatus(t, resp, http.StatusOK)
	errs := strings.Join(texts(doc.Find(".error-text")), " | ")
	for _, want := range []string{"type a message", "from 1 to 4096", "from 0 (the likeliest tokens) to 2"} {
		if !strings.Contains(errs, want) {
			t.Errorf("the form's errors %q say nothing of %q", errs, want)
		}
	}
	if doc.Find(`[name="max_tokens"][aria-invalid="true"]`).Length() != 1 {
		t.Error("max tokens is not marked invalid")
	}
	if len(gw.sent()) != 0 {
		t.Error("a form with errors called the model")
	}

	// Another user cannot take the reply.
	resp = b.do(http.MethodPost, "/catalog/tiny/playground", url.Values{"message": {"Hello"}, "csrf": {b.csrf}}, htmx)
	stream := mustStatus(t, resp, http.StatusOK).Find(`[sse-connect]`).AttrOr("sse-connect", "")
	mustAddUser(t, e.db, "grace", testPassword)
	other := e.browser()
	other.signIn("grace", testPassword, "").Body.Close()
	ev := nextEvent(t, readEvents(t, other.get(stream).Body))
	if ev.name != "end" || !strings.Contains(ev.data, "send the message again") || len(gw.sent()) != 0 {
		t.Errorf("another user's stream: %q %q, %d calls", ev.name, ev.data, len(gw.sent()))
	}

	// A model the catalog does not have.
	if resp := b.get("/catalog/nope/playground"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the playground of a model not in the catalog: %s", resp.Status)
	}
}

// TestPlaygroundReplyFails: the gateway's sentence ends the reply, and
// the status line says the reply stopped.
func TestPlaygroundReplyFails(t *testing.T) {
	gw := &fakeGateway{err: operr.New(operr.Unavailable, "the gateway answered 503 Service Unavailable: tiny is parked: its engine keeps failing")}
	e := newPlaygroundEnv(t, gw)
	b := e.signedIn()
	resp := b.do(http.MethodPost, "/catalog/tiny/playground", url.Values{"message": {"Hello"}, "csrf": {b.csrf}}, htmx)
	stream := mustStatus(t, resp, http.StatusOK).Find(`[sse-connect]`).AttrOr("sse-connect", "")
	ev := nextEvent(t, readEvents(t, b.get(stream).Body))
	doc, _ := goquery.NewDocumentFromReader(strings.NewReader(ev.data))
	if ev.name != "end" || !strings.Contains(doc.Find(`[data-testid="reply-error"]`).Text(), "tiny is parked") {
		t.Errorf("the end: %q %q", ev.name, ev.data)
	}
	if got := doc.Find(`#playground-status`).Text(); !strings.HasPrefix(got, "The reply stopped: ") {
		t.Errorf("the status line %q", got)
	}
	// A failed reply carries no hidden fields: it is not part of the
	// conversation sent next.
	if doc.Find(`input[form="playground-form"]`).Length() != 0 {
		t.Error("a failed reply joins the conversation")
	}
}

// TestPlaygroundWithoutJavaScript: the form posts, the reply is waited
// for, and the page comes back with the conversation and the reply's speed.
func TestPlaygroundWithoutJavaScript(t *testing.T) {
	gw := &fakeGateway{chunks: chatChunks("Hi", "!")}
	e := newPlaygroundEnv(t, gw)
	b := e.signedIn()
	page := mustStatus(t, b.get("/catalog/tiny/playground"), http.StatusOK)
	doc := mustStatus(t, b.post("/catalog/tiny/playground", playgroundForm(page, "Hello")), http.StatusOK)
	if got := texts(doc.Find(`[data-testid="turn-text"], [data-testid="reply-text"]`)); strings.Join(got, "|") != "Hello|Hi!" {
		t.Errorf("the conversation %q", got)
	}
	if doc.Find(`[data-testid="reply-tps"]`).Text() == "" {
		t.Error("no tokens per second")
	}
	if got := doc.Find(`#playground-status`).Text(); !strings.HasPrefix(got, "Reply done: 2 tokens") {
		t.Errorf("status %q", got)
	}
	if doc.Find(`textarea[name="message"]`).Text() != "" {
		t.Error("the message stays in the form after it was sent")
	}
}

// TestPlaygroundEmbeds: an embedding model's playground embeds a text and
// shows the vector's length and first values.
func TestPlaygroundEmbeds(t *testing.T) {
	vec := make([]float64, 96)
	for i := range vec {
		vec[i] = float64(i) / 100
	}
	body, _ := json.Marshal(map[string]any{"object": "list", "data": []any{map[string]any{"index": 0, "embedding": vec}}})
	gw := &fakeGateway{chunks: []string{string(body)}}
	e := newPlaygroundEnv(t, gw)
	b := e.signedIn()
	page := mustStatus(t, b.get("/catalog/embed/playground"), http.StatusOK)
	if page.Find(`#turns`).Length() != 0 || page.Find(`form#playground-form[hx-target="#embedding-result"]`).Length() != 1 {
		t.Fatal("an embedding model's playground is not a form to embed a text")
	}
	callIt(t, page, "embed", e.srv.URL)

	resp := b.do(http.MethodPost, "/catalog/embed/playground", playgroundForm(page, "hello world"), htmx)
	doc := mustStatus(t, resp, http.StatusOK)
	if got := doc.Find(`[data-testid="dimensions"]`).Text(); got != "96" {
		t.Errorf("dimensions %q", got)
	}
	if got := doc.Find(`[data-testid="first-values"]`).Text(); !strings.HasPrefix(got, "0.0000, 0.0100, 0.0200,") {
		t.Errorf("first values %q", got)
	}
	if call := gw.sent()[0]; call["_route"] != "/v1/embeddings" || call["input"] != "hello world" || call["model"] != "embed" {
		t.Errorf("the call %v", call)
	}
}

// TestCallItPanels: the catalog lists each model's traffic, its playground
// and how to call it; a job that served a model shows the same; the
// address is --public-url's when set.
func TestCallItPanels(t *testing.T) {
	gw := &fakeGateway{traffic: map[string]gateway.Traffic{"tiny": {Requests: 12, Failed: 1, Answered: 11, P50: 340 * time.Millisecond}}}
	e := newPlaygroundEnv(t, gw)
	b := e.signedIn()

	doc := mustStatus(t, b.get("/catalog"), http.StatusOK)
	tiny := doc.Find(`[data-testid="model-row"][data-model="tiny"]`)
	if got := tiny.Find(`[data-testid="requests"]`).Text(); got != "12 requests, 1 failed" {
		t.Errorf("tiny's requests %q", got)
	}
	if got := tiny.Find(`[data-testid="latency"]`).Text(); got != "340 ms" {
		t.Errorf("tiny's latency %q", got)
	}
	if got := doc.Find(`[data-testid="model-row"][data-model="embed"] [data-testid="requests"]`).Text(); got != "none" {
		t.Errorf("embed's requests %q", got)
	}
	if got := tiny.Find(`[data-testid="playground-link"]`).AttrOr("href", ""); got != "/catalog/tiny/playground" {
		t.Errorf("tiny's playground link %q", got)
	}
	callIt(t, doc, "tiny", e.srv.URL)
	callIt(t, doc, "embed", e.srv.URL)

	// The job that served tiny.
	started := time.Now().Add(-2 * time.Minute)
	mustInsertJob(t, e.db, func() jobs.Job { j := doneJob("j-served", started); j.Model = "tiny"; return j }())
	job := mustStatus(t, b.get("/jobs/j-served"), http.StatusOK)
	callIt(t, job, "tiny", e.srv.URL)
	if got := job.Find(`[data-testid="outcome"] [data-testid="playground-link"]`).AttrOr("href", ""); got != "/catalog/tiny/playground" {
		t.Errorf("the job's playground link %q", got)
	}
	// A job whose model has left the catalog has nothing to call.
	mustInsertJob(t, e.db, func() jobs.Job { j := doneJob("j-gone", started); j.Model = "gone"; return j }())
	if n := mustStatus(t, b.get("/jobs/j-gone"), http.StatusOK).Find(`[data-testid="call-it"]`).Length(); n != 0 {
		t.Errorf("a job whose model is not in the catalog shows %d call-it panels", n)
	}

	// Behind a proxy, the address users reach.
	pub := newPlaygroundEnv(t, gw, func(d *handlers.Deps) { d.PublicURL = "https://models.example.com/" })
	callIt(t, mustStatus(t, pub.signedIn().get("/catalog/tiny/playground"), http.StatusOK), "tiny", "https://models.example.com")
}

// TestPlaygroundClosedMidReply: a page closed while the model is still to
// answer stops the call, which frees the engine's slot.
func TestPlaygroundClosedMidReply(t *testing.T) {
	gw := &fakeGateway{chunks: chatChunks("Hi"), hold: make(chan struct{}), stopped: make(chan struct{})}
	e := newPlaygroundEnv(t, gw)
	b := e.signedIn()
	resp := b.do(http.MethodPost, "/catalog/tiny/playground", url.Values{"message": {"Hello"}, "csrf": {b.csrf}}, htmx)
	stream := mustStatus(t, resp, http.StatusOK).Find(`[sse-connect]`).AttrOr("sse-connect", "")
	resp = b.get(stream)
	waitFor := time.Now().Add(5 * time.Second)
	for len(gw.sent()) == 0 && time.Now().Before(waitFor) {
		time.Sleep(5 * time.Millisecond)
	}
	resp.Body.Close()
	e.srv.CloseClientConnections()
	select {
	case <-gw.stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the call went on after the page went away")
	}
}

// TestPlaygroundSaysLoadingWhileTheModelStarts: a message sent to a model
// that is not loaded says "Loading tiny…" until the model has started,
// then that it waits for the reply, which then comes.
func TestPlaygroundSaysLoadingWhileTheModelStarts(t *testing.T) {
	gw := &fakeGateway{chunks: chatChunks("Hi"), hold: make(chan struct{}), stopped: make(chan struct{}), state: gateway.Unloaded}
	e := newPlaygroundEnv(t, gw)
	b := e.signedIn()
	// Not loaded, the page says the first message loads it.
	page := mustStatus(t, b.get("/catalog/tiny/playground"), http.StatusOK)
	if got := strings.Join(strings.Fields(page.Find(`[data-testid="loads-on-first"]`).Text()), " "); got != "tiny is not loaded now: the first message loads it, and its reply waits while it starts." {
		t.Errorf("the page of a model not loaded says %q", got)
	}
	gw.mu.Lock()
	gw.state = gateway.Loading
	gw.mu.Unlock()
	if mustStatus(t, b.get("/catalog/tiny/playground"), http.StatusOK).Find(`[data-testid="loads-on-first"]`).Length() != 0 {
		t.Error("the page of a model already loading says the first message loads it")
	}
	resp := b.do(http.MethodPost, "/catalog/tiny/playground", url.Values{"message": {"Hello"}, "csrf": {b.csrf}}, htmx)
	sent := mustStatus(t, resp, http.StatusOK)
	if got := sent.Find(`[data-testid="reply-waiting"]`).Text(); !strings.HasPrefix(got, "Loading tiny…") {
		t.Errorf("the reply to come says %q; want Loading tiny…", got)
	}
	// The model has started a moment later; its reply comes a moment
	// after that.
	time.AfterFunc(400*time.Millisecond, func() {
		gw.mu.Lock()
		gw.state = gateway.Loaded
		gw.mu.Unlock()
	})
	time.AfterFunc(1200*time.Millisecond, func() { close(gw.hold) })
	resp = b.get(sent.Find(`[sse-connect]`).AttrOr("sse-connect", ""))
	defer resp.Body.Close()
	var said []string
	for ev := range readEvents(t, resp.Body) {
		doc, _ := goquery.NewDocumentFromReader(strings.NewReader(ev.data))
		said = append(said, ev.name+": "+strings.TrimSpace(doc.Find(`[data-testid="reply-waiting"],[data-testid="reply-text"]`).First().Text()))
	}
	if len(said) < 2 || said[0] != "reply: Waiting for the model…" || said[len(said)-1] != "end: Hi" {
		t.Errorf("the stream said %q; want that it waits for the model once loaded, then the reply", said)
	}
}

// roomFleet is a fleet whose one model's health a test changes while a
// reply streams.
type roomFleet struct {
	fakeFleet
	mu     sync.Mutex
	health fleet.ModelHealth
}

func (f *roomFleet) ModelHealth() []fleet.ModelHealth {
	f.mu.Lock()
	defer f.mu.Unlock()
	return []fleet.ModelHealth{f.health}
}

func (f *roomFleet) set(h fleet.ModelHealth) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.health = h
}

// TestPlaygroundSaysItWaitsForRoom: a message to a model waiting for room
// that another model's replica holds says what it waits for, as the fleet
// says it, rather than "Loading tiny…"; then that it loads, once the room
// is given back. The reply's rate leaves the wait out, and the heading,
// which said the model was not loaded, says how it fares once it answered.
func TestPlaygroundSaysItWaitsForRoom(t *testing.T) {
	gw := &fakeGateway{chunks: chatChunks("One", " two", " three", " four", " five"), gap: 10 * time.Millisecond,
		hold: make(chan struct{}), stopped: make(chan struct{}), state: gateway.Unloaded}
	const placement = fleet.Making + " on node local: waiting for gamma-1 to finish the 3 requests it answers"
	fl := &roomFleet{health: fleet.ModelHealth{Model: "tiny", Want: 0}}
	e := newPlaygroundEnv(t, gw, func(d *handlers.Deps) { d.Fleet = fl })
	b := e.signedIn()
	page := mustStatus(t, b.get("/catalog/tiny/playground"), http.StatusOK)
	if page.Find(`#playground-state [data-testid="loads-on-first"]`).Length() != 1 {
		t.Fatal("the page of a model not loaded does not say the first message loads it")
	}

	gw.mu.Lock()
	gw.state = gateway.Loading
	gw.mu.Unlock()
	fl.set(fleet.ModelHealth{Model: "tiny", Want: 1, Placement: placement})
	sent := mustStatus(t, b.do(http.MethodPost, "/catalog/tiny/playground", url.Values{"message": {"Count"}, "csrf": {b.csrf}}, htmx), http.StatusOK)
	want := "Waiting for room on node local: waiting for gamma-1 to finish the 3 requests it answers…"
	if got := sent.Find(`[data-testid="reply-waiting"]`).Text(); !strings.HasPrefix(got, want) {
		t.Errorf("the reply to come says %q; want %q", got, want)
	}

	// gamma-1 gives its room back a moment later; tiny starts, and
	// answers a second after the message.
	const wait = time.Second
	time.AfterFunc(400*time.Millisecond, func() { fl.set(fleet.ModelHealth{Model: "tiny", Want: 1}) })
	time.AfterFunc(wait, func() {
		fl.set(fleet.ModelHealth{Model: "tiny", Want: 1, Ready: 1})
		gw.mu.Lock()
		gw.state = gateway.Loaded
		gw.mu.Unlock()
		close(gw.hold)
	})
	resp := b.get(sent.Find(`[sse-connect]`).AttrOr("sse-connect", ""))
	defer resp.Body.Close()
	var said []string
	var end *goquery.Document
	for ev := range readEvents(t, resp.Body) {
		doc, _ := goquery.NewDocumentFromReader(strings.NewReader(ev.data))
		if w := doc.Find(`[data-testid="reply-waiting"]`); w.Length() > 0 {
			said = append(said, strings.SplitAfter(w.Text(), "…")[0])
		}
		if ev.name == "end" {
			end = doc
		}
	}
	if !slices.Contains(said, "Loading tiny…") {
		t.Errorf("the stream said %q; want it to say tiny loads once the room was given back", said)
	}
	if end == nil {
		t.Fatal("the stream had no end")
	}
	// Five tokens written in tens of milliseconds: counted over the
	// second's wait they read under 5 a second.
	tps, _ := strconv.ParseFloat(end.Find(`[data-testid="reply-tps"]`).Text(), 64)
	if tps <= float64(5)/wait.Seconds() {
		t.Errorf("the reply reads %v tokens per second (%q); want the wait of %s left out", tps, end.Find(`[data-testid="reply-tokens"]`).Text(), wait)
	}
	state := end.Find(`#playground-state`)
	if state.AttrOr("hx-swap-oob", "") != "true" || state.Find(`[data-testid="loads-on-first"]`).Length() != 0 ||
		state.Find(`[data-testid="playground-running"]`).Text() != "1 of 1 ready" {
		t.Errorf("the end's heading says %q (swap %q); want tiny's replica ready, and no longer that it is not loaded",
			strings.Join(strings.Fields(state.Text()), " "), state.AttrOr("hx-swap-oob", ""))
	}
}

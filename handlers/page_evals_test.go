package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/evals"
)

// fakeAsker is the gateway as the eval runner asks it: every chat request
// is answered with answer, after a release when hold is set. The runner's
// own tests ask real engines; here the answers are chosen, so that two
// runs differ as two versions of a model would.
type fakeAsker struct {
	mu     sync.Mutex
	answer string
	hold   chan struct{}
}

func (f *fakeAsker) Ask(ctx context.Context, route string, body []byte) ([]byte, error) {
	f.mu.Lock()
	answer, hold := f.answer, f.hold
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": map[string]string{"role": "assistant", "content": answer}}}})
	return b, nil
}

func (f *fakeAsker) set(answer string, hold chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer, f.hold = answer, hold
}

// twoCases passes an answer of Paris, and fails any other.
const twoCases = `{"cases": [
	{"name": "capital", "prompt": "What is the capital of France? One word.", "expect": {"regex": "(?i)paris"}},
	{"name": "exact", "prompt": "Say Paris.", "max_tokens": 4, "expect": {"exact": "Paris"}}
]}`

// waitRun waits for run id to end.
func (e *consoleEnv) waitRun(id int64) evals.Run {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		run, err := e.evals.Get(context.Background(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		if run.State != evals.StateRunning {
			return run
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("run %d still running after 10s: %+v", id, run)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestEvalsPage(t *testing.T) {
	e := newConsoleEnv(t)
	ctx := context.Background()
	for _, n := range []string{"tiny", "bare"} {
		if err := e.catalog.Add(ctx, tinyModel(n), "test"); err != nil {
			t.Fatal(err)
		}
	}
	b := e.signedIn()

	// The catalog's row links the page.
	doc := mustStatus(t, b.get("/catalog"), http.StatusOK)
	if href, _ := doc.Find(`[data-model="tiny"] [data-testid="evals-link"]`).Attr("href"); href != "/catalog/tiny/evals" {
		t.Errorf("the catalog's row links %q, want /catalog/tiny/evals", href)
	}

	doc = mustStatus(t, b.get("/catalog/tiny/evals"), http.StatusOK)
	if s := doc.Find(`[data-testid="suite-summary"]`).Text(); !strings.Contains(s, "No suite yet") {
		t.Errorf("a model without a suite: %q", s)
	}
	if doc.Find(`[data-testid="run-now"]`).Length() != 0 || doc.Find(`[data-testid="no-runs"]`).Length() != 1 {
		t.Error("a model without a suite offers Run now, or shows runs")
	}

	// An invalid suite comes back in the form with the sentence, as 200,
	// and changes nothing.
	bad := `{"cases": [{"name": "capital", "prompt": "p", "expect": {"regex": "(?i)paris("}}]}`
	doc = mustStatus(t, b.post("/catalog/tiny/evals", url.Values{"suite": {bad}}), http.StatusOK)
	if msg := doc.Find(`[data-testid="suite-error"]`).Text(); !strings.Contains(msg, `case 1 ("capital"): expect.regex is not a Go (RE2) regular expression`) {
		t.Errorf("the refusal says %q", msg)
	}
	if got := doc.Find(`[data-testid="suite"]`).Text(); got != bad {
		t.Errorf("the editor holds %q after a refusal, want what was sent", got)
	}
	if st, _ := e.evals.Suite(ctx, "tiny"); len(st.Suite.Cases) != 0 {
		t.Errorf("a refused suite was kept: %+v", st)
	}

	resp := b.post("/catalog/tiny/evals", url.Values{"suite": {twoCases}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/catalog/tiny/evals?saved=1" {
		t.Fatalf("saving a suite: %s to %q\n%s", resp.Status, resp.Header.Get("Location"), body(t, resp))
	}
	resp.Body.Close()
	doc = mustStatus(t, b.get("/catalog/tiny/evals?saved=1"), http.StatusOK)
	if n := doc.Find(`[data-testid="notice"]`).Text(); n != "The suite is saved: 2 cases." {
		t.Errorf("the notice after saving: %q", n)
	}
	if s := doc.Find(`[data-testid="suite-summary"]`).Text(); !strings.HasPrefix(s, "2 cases, saved by "+testUser+" at ") {
		t.Errorf("the suite's summary: %q", s)
	}
	if _, err := evals.Parse([]byte(doc.Find(`[data-testid="suite"]`).Text())); err != nil {
		t.Errorf("the editor's suite does not read back: %v", err)
	}

	// Two runs, the model answering differently in each, side by side.
	e.asker.set("Lyon", nil)
	first := runNow(t, b, e, "tiny")
	e.asker.set("Paris", nil)
	second := runNow(t, b, e, "tiny")

	doc = mustStatus(t, b.get("/catalog/tiny/evals"), http.StatusOK)
	heads := doc.Find(`[data-testid="run-head"]`)
	if heads.Length() != 2 || heads.Eq(0).AttrOr("data-run", "") != itoa(int(first.ID)) || heads.Eq(1).AttrOr("data-run", "") != itoa(int(second.ID)) {
		t.Fatalf("run columns %v, want runs %d then %d", texts(heads), first.ID, second.ID)
	}
	for i, want := range []string{"0 of 2 passed", "2 of 2 passed"} {
		h := heads.Eq(i)
		if got := h.Find(`[data-testid="run-score"]`).Text(); got != want {
			t.Errorf("run %d's score %q, want %q", i+1, got, want)
		}
		if got := h.Find(`[data-testid="run-target"]`).Text(); got != "tiny" {
			t.Errorf("run %d's target %q", i+1, got)
		}
		if got := h.Find(`[data-testid="run-commit"]`).Text(); got != "c0ffeec" {
			t.Errorf("run %d's commit %q, want the short commit", i+1, got)
		}
	}
	for _, tc := range []struct {
		row    string
		reason string
	}{
		{"capital", `the answer does not match (?i)paris: "Lyon"`},
		{"exact", `the answer is not "Paris": "Lyon"`},
	} {
		cells := doc.Find(`[data-testid="case-row"][data-case="` + tc.row + `"] [data-testid="cell"]`)
		if cells.Length() != 2 || cells.Eq(0).AttrOr("data-mark", "") != "fail" || cells.Eq(1).AttrOr("data-mark", "") != "pass" {
			t.Errorf("%s: cells %v, want fail then pass", tc.row, texts(cells))
			continue
		}
		if got := cells.Eq(0).Find(`[data-testid="reason"]`).Text(); got != tc.reason {
			t.Errorf("%s: the reason shown %q, want %q", tc.row, got, tc.reason)
		}
	}
	if doc.Find(`[data-testid="eval-runs"]`).AttrOr("hx-get", "") != "" {
		t.Error("the runs' table polls with no run running")
	}

	// A run under way: its column says which cases are still to come, and
	// the table polls until it ends; the fragment is the table alone.
	hold := make(chan struct{})
	e.asker.set("Paris", hold)
	resp = b.post("/catalog/tiny/evals/run", nil)
	resp.Body.Close()
	doc = mustStatus(t, b.get("/catalog/tiny/evals"), http.StatusOK)
	runs := doc.Find(`[data-testid="eval-runs"]`)
	if runs.AttrOr("hx-get", "") != "/catalog/tiny/evals" || runs.AttrOr("hx-trigger", "") != "every 1s" {
		t.Errorf("the table of a running run does not poll: hx-get %q", runs.AttrOr("hx-get", ""))
	}
	if got := texts(doc.Find(`[data-testid="case-row"] [data-testid="cell"]`).Last()); len(got) != 1 || got[0] != "not asked yet" {
		t.Errorf("the running run's last cell says %v, want \"not asked yet\"", got)
	}
	// Run now again, while it runs, is refused on the page.
	doc = mustStatus(t, b.post("/catalog/tiny/evals/run", nil), http.StatusOK)
	if msg := doc.Find(`[data-testid="run-error"]`).Text(); !strings.Contains(msg, "is asking tiny now") {
		t.Errorf("Run now during a run says %q", msg)
	}
	frag := body(t, b.get("/catalog/tiny/evals", htmx...))
	if strings.Contains(frag, "<html") || !strings.Contains(frag, `id="eval-runs"`) {
		t.Errorf("the fragment is not the table alone:\n%.300s", frag)
	}
	close(hold)

	// Run now without a suite says why on the page; an unknown model is
	// not found.
	doc = mustStatus(t, b.post("/catalog/bare/evals/run", nil), http.StatusOK)
	if msg := doc.Find(`[data-testid="run-error"]`).Text(); !strings.Contains(msg, "bare has no eval suite to run") {
		t.Errorf("Run now without a suite says %q", msg)
	}
	mustStatus(t, b.get("/catalog/nobody/evals"), http.StatusNotFound)
}

// runNow presses Run now on model's page and waits for the run to end.
func runNow(t *testing.T, b *browser, e *consoleEnv, model string) evals.Run {
	t.Helper()
	resp := b.post("/catalog/"+model+"/evals/run", nil)
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || err != nil || loc.Path != "/catalog/"+model+"/evals" || loc.Query().Get("ran") == "" {
		t.Fatalf("Run now: %s to %q", resp.Status, resp.Header.Get("Location"))
	}
	var id int64
	if err := json.Unmarshal([]byte(loc.Query().Get("ran")), &id); err != nil {
		t.Fatal(err)
	}
	doc := mustStatus(t, b.get(loc.RequestURI()), http.StatusOK)
	if n := doc.Find(`[data-testid="notice"]`).Text(); !strings.HasPrefix(n, "Run "+itoa(int(id))+" asks "+model) {
		t.Errorf("the notice after Run now: %q", n)
	}
	return e.waitRun(id)
}

// TestEvalsAddCase: the add-case form puts a case at the end of the kept
// suite; a schema that is not JSON, or a case the suite refuses, comes
// back in the form with the sentence and what was typed, and nothing is
// changed; an embedding model's form asks for a similarity's three texts.
func TestEvalsAddCase(t *testing.T) {
	e := newConsoleEnv(t)
	ctx := context.Background()
	if err := e.catalog.Add(ctx, tinyModel("tiny"), "test"); err != nil {
		t.Fatal(err)
	}
	embed := tinyModel("embed")
	embed.Aliases, embed.Capabilities = nil, catalog.Capabilities{Embeddings: true}
	if err := e.catalog.Add(ctx, embed, "test"); err != nil {
		t.Fatal(err)
	}
	b := e.signedIn()
	if _, err := e.evals.SetSuite(ctx, "tiny", []byte(twoCases), "ada"); err != nil {
		t.Fatal(err)
	}
	add := func(model string, f url.Values) *http.Response {
		return b.post("/catalog/"+model+"/evals/cases", f)
	}

	resp := add("tiny", url.Values{"case_name": {"order"}, "prompt": {"Give the order as JSON."}, "kind": {"json_schema"},
		"expect": {`{"type": "object"`}})
	doc := mustStatus(t, resp, http.StatusOK)
	if got := doc.Find(`[data-testid="add-case-error"]`).Text(); !strings.Contains(got, "schema is not JSON") ||
		doc.Find(`[data-testid="case-expect"]`).Text() != `{"type": "object"` {
		t.Errorf("a schema that is not JSON: %q, the form holding %q", got, doc.Find(`[data-testid="case-expect"]`).Text())
	}
	doc = mustStatus(t, add("tiny", url.Values{"case_name": {"capital"}, "prompt": {"Again?"}, "kind": {"regex"}, "expect": {"x"}}), http.StatusOK)
	if got := doc.Find(`[data-testid="add-case-error"]`).Text(); !strings.Contains(got, `case 3 ("capital")`) {
		t.Errorf("a second case of the same name: %q; want the suite's sentence naming case 3", got)
	}
	if st, _ := e.evals.Suite(ctx, "tiny"); len(st.Suite.Cases) != 2 {
		t.Fatalf("a refused case changed the suite: %d cases", len(st.Suite.Cases))
	}

	resp = add("tiny", url.Values{"case_name": {"order"}, "prompt": {"Give the order as JSON."}, "kind": {"json_schema"},
		"expect": {`{"type": "object"}`}, "max_tokens": {"128"}, "system": {"Answer in JSON."}})
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/catalog/tiny/evals?saved=1" {
		t.Fatalf("adding a good case: %s to %q", resp.Status, resp.Header.Get("Location"))
	}
	st, _ := e.evals.Suite(ctx, "tiny")
	if n := len(st.Suite.Cases); n != 3 || st.Suite.Cases[2].Name != "order" || st.Suite.Cases[2].Kind() != evals.KindJSONSchema ||
		st.Suite.Cases[2].MaxTokens != 128 || st.Suite.Cases[2].System != "Answer in JSON." || st.Suite.Cases[0].Name != "capital" {
		t.Errorf("the suite after the case was added: %+v", st.Suite.Cases)
	}

	doc = mustStatus(t, b.get("/catalog/embed/evals"), http.StatusOK)
	if doc.Find(`[data-testid="add-case-form"] input[name="anchor"]`).Length() != 1 || doc.Find(`[data-testid="case-prompt"]`).Length() != 0 {
		t.Error("an embedding model's form does not ask for a similarity's texts")
	}
	resp = add("embed", url.Values{"case_name": {"cats"}, "kind": {"similarity"}, "anchor": {"a cat"}, "closer": {"a kitten"}, "farther": {"an invoice"}})
	resp.Body.Close()
	if st, _ := e.evals.Suite(ctx, "embed"); resp.StatusCode != http.StatusSeeOther || len(st.Suite.Cases) != 1 || st.Suite.Cases[0].Kind() != evals.KindSimilarity {
		t.Errorf("a similarity case: %s, suite %+v", resp.Status, st.Suite.Cases)
	}
}

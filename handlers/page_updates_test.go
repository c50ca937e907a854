package handlers_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"modelserve/catalog"
	"modelserve/internal/hf"
	"modelserve/internal/updates"
)

// The commits of the updates tests' repository: the one served, and the
// one its branch moves to.
var (
	servedCommit = strings.Repeat("a1", 20)
	movedCommit  = strings.Repeat("b2", 20)
	servedSHA    = strings.Repeat("1", 64)
	movedSHA     = strings.Repeat("2", 64)
)

// servedFromBranch puts name in the catalog as served from test/<name>-GGUF's
// main at servedCommit, and the registry's repository there.
func servedFromBranch(t *testing.T, e *consoleEnv, name string) {
	t.Helper()
	repo := "test/" + name + "-GGUF"
	e.reg.add(hf.Repo{ID: repo, Commit: servedCommit, Files: []hf.File{
		{Path: "README.md", Size: 10}, {Path: "model-Q4_K_M.gguf", Size: 1000, SHA256: servedSHA}}})
	m := tinyModel(name)
	m.Origin = &catalog.Origin{Repo: repo, Revision: servedCommit, Ref: "main", RefKind: hf.RefBranch,
		Files: []catalog.OriginFile{{Path: "model-Q4_K_M.gguf", Bytes: 1000, SHA256: servedSHA}}}
	if err := e.catalog.Add(context.Background(), m, "test"); err != nil {
		t.Fatal(err)
	}
}

// moveBranch moves the registry's main of test/<name>-GGUF to movedCommit,
// with the model's file re-uploaded larger.
func moveBranch(e *consoleEnv, name string) {
	e.reg.add(hf.Repo{ID: "test/" + name + "-GGUF", Commit: movedCommit, Files: []hf.File{
		{Path: "README.md", Size: 10}, {Path: "model-Q4_K_M.gguf", Size: 2_000_000, SHA256: movedSHA}}})
}

// pinned puts name in the catalog as served at a tag.
func pinned(t *testing.T, e *consoleEnv, name string) {
	t.Helper()
	m := tinyModel(name)
	m.Origin.Ref, m.Origin.RefKind = "v1.0", hf.RefTag
	if err := e.catalog.Add(context.Background(), m, "test"); err != nil {
		t.Fatal(err)
	}
}

// TestCatalogUpdateBadgeAndPage: the catalog says how each model is
// watched; Check now on a model whose branch moved to new weights leads to
// the update's page (old and new commit, the file and both sizes, when it
// was noticed), and the catalog then shows the badge linking to it.
func TestCatalogUpdateBadgeAndPage(t *testing.T) {
	e := newConsoleEnv(t)
	servedFromBranch(t, e, "tiny")
	servedFromBranch(t, e, "steady")
	pinned(t, e, "fixed")
	b := e.signedIn()

	doc := mustStatus(t, b.get("/catalog"), http.StatusOK)
	tiny := doc.Find(`[data-testid="model-row"][data-model="tiny"]`)
	if got := tiny.Find(`[data-testid="watch"]`).Text(); got != "branch main: not checked yet" {
		t.Errorf("tiny's watch line %q", got)
	}
	if tiny.Find(`[data-testid="update-badge"]`).Length() != 0 {
		t.Error("a badge before any check")
	}
	form := tiny.Find(`form[action="/catalog/tiny/check"]`)
	if form.Length() != 1 || form.Find(`input[name="csrf"]`).AttrOr("value", "") != b.csrf {
		t.Fatal("tiny has no Check now form carrying the CSRF token")
	}
	fixed := doc.Find(`[data-testid="model-row"][data-model="fixed"]`)
	if got := fixed.Find(`[data-testid="watch"]`).Text(); !strings.Contains(got, "fixed is pinned to the tag v1.0 and is never updated") {
		t.Errorf("fixed's watch line %q", got)
	}
	if fixed.Find(`form[action="/catalog/fixed/check"]`).Length() != 0 {
		t.Error("a pinned model offers Check now")
	}

	// Without the token the check is refused, and nothing is asked.
	resp := b.do(http.MethodPost, "/catalog/tiny/check", nil, nil)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a check without the CSRF token: %s", resp.Status)
	}
	resp.Body.Close()

	moveBranch(e, "tiny")
	resp = b.post("/catalog/tiny/check", nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/updates/1" {
		t.Fatalf("Check now: %s to %q, want 303 to /updates/1", resp.Status, resp.Header.Get("Location"))
	}
	page := mustStatus(t, b.get("/updates/1"), http.StatusOK)
	for what, want := range map[string]string{
		`[data-testid="old-commit"]`: servedCommit[:7],
		`[data-testid="new-commit"]`: movedCommit[:7],
		`[data-testid="state"]`:      "○ available",
		`[data-testid="file"][data-path="model-Q4_K_M.gguf"] [data-testid="old-size"]`: "1 KB (1000 bytes)",
		`[data-testid="file"][data-path="model-Q4_K_M.gguf"] [data-testid="new-size"]`: "2 MB (2000000 bytes)",
	} {
		if got := strings.TrimSpace(page.Find(what).Text()); got != want {
			t.Errorf("the update page's %s reads %q, want %q", what, got, want)
		}
	}
	if page.Find(`[data-testid="file"]`).Length() != 1 {
		t.Errorf("%d files listed, want the GGUF alone (the README did not change)", page.Find(`[data-testid="file"]`).Length())
	}
	if page.Find(`[data-testid="noticed"]`).AttrOr("datetime", "") == "" || page.Find(`[data-testid="note"]`).Length() != 0 {
		t.Error("the page does not say when it was noticed, or says the model moved on")
	}
	if page.Find(`form[action="/catalog/tiny/check"]`).Length() != 1 {
		t.Error("the update page offers no Check now")
	}
	try := page.Find(`form[data-testid="try-update"]`)
	if try.AttrOr("action", "") != "/catalog/tiny/update" || try.Find(`input[name="update_id"]`).AttrOr("value", "") != "1" ||
		!strings.Contains(try.Text(), "it takes 10% of tiny's requests") || page.Find(`[data-testid="trial"]`).Length() != 0 {
		t.Errorf("the update page's Try form: %q to %q", try.Text(), try.AttrOr("action", ""))
	}
	if got := try.Find(`[data-testid="no-room"]`).Text(); got != "With no room beside tiny, it replaces tiny's replica in place instead, judged by its eval suite: "+
		"requests wait while tiny's replica reloads (no load of it has been measured yet)." {
		t.Errorf("the Try form says of no room beside: %q", got)
	}

	doc = mustStatus(t, b.get("/catalog"), http.StatusOK)
	tiny = doc.Find(`[data-testid="model-row"][data-model="tiny"]`)
	if badge := tiny.Find(`[data-testid="update-badge"]`); badge.AttrOr("href", "") != "/updates/1" || !strings.HasPrefix(badge.Text(), "update available") {
		t.Errorf("tiny's badge %q to %q, want update available linking to /updates/1", badge.Text(), badge.AttrOr("href", ""))
	}
	if got := tiny.Find(`[data-testid="watch"]`).Text(); got != "branch main: checked just now, new weights at "+movedCommit[:7] {
		t.Errorf("tiny's watch line after the check %q", got)
	}

	// A branch that did not move: back to the catalog, which says so.
	resp = b.post("/catalog/steady/check", nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/catalog?checked=steady" {
		t.Fatalf("Check now on steady: %s to %q", resp.Status, resp.Header.Get("Location"))
	}
	doc = mustStatus(t, b.get("/catalog?checked=steady"), http.StatusOK)
	if got := doc.Find(`[data-testid="notice"]`).Text(); got != "Checked steady: checked just now, up to date at "+servedCommit[:7]+"." {
		t.Errorf("notice %q", got)
	}
	if doc.Find(`[data-testid="model-row"][data-model="steady"] [data-testid="update-badge"]`).Length() != 0 {
		t.Error("steady has a badge though its branch did not move")
	}

	// A pinned model asked anyway is refused in a sentence; an unknown
	// update is not found.
	if doc := mustStatus(t, b.post("/catalog/fixed/check", nil), http.StatusConflict); !strings.Contains(doc.Find(`[role="alert"]`).Text(), "pinned to the tag v1.0") {
		t.Errorf("checking a pinned model says %q", doc.Find(`[role="alert"]`).Text())
	}
	mustStatus(t, b.get("/updates/99"), http.StatusNotFound)
	mustStatus(t, b.get("/updates/x"), http.StatusNotFound)

	// Served again at the new commit, tiny has no update available, its
	// last check (which found that commit) says it is up to date at it,
	// and the update's page says the model has moved on.
	m, _ := e.catalog.Get(context.Background(), "tiny")
	m.Origin.Revision = movedCommit
	m.Origin.Files[0] = catalog.OriginFile{Path: "model-Q4_K_M.gguf", Bytes: 2_000_000, SHA256: movedSHA}
	if err := e.catalog.Add(context.Background(), m, "test"); err != nil {
		t.Fatal(err)
	}
	doc = mustStatus(t, b.get("/catalog"), http.StatusOK)
	tiny = doc.Find(`[data-testid="model-row"][data-model="tiny"]`)
	if tiny.Find(`[data-testid="update-badge"]`).Length() != 0 || tiny.Find(`[data-testid="watch"]`).Text() != "branch main: checked just now, up to date at "+movedCommit[:7] {
		t.Errorf("served again: badge %d, watch line %q", tiny.Find(`[data-testid="update-badge"]`).Length(), tiny.Find(`[data-testid="watch"]`).Text())
	}
	page = mustStatus(t, b.get("/updates/1"), http.StatusOK)
	if got := page.Find(`[data-testid="note"]`).Text(); got != "tiny has been served again since, and runs commit "+movedCommit[:7]+" now." {
		t.Errorf("the update's note after tiny was served again: %q", got)
	}
}

// TestCatalogShowsACanaryOnTrial: a canary is listed as the new version
// of its model on trial, with its share, and offered to no client.
func TestCatalogShowsACanaryOnTrial(t *testing.T) {
	e := newConsoleEnv(t)
	servedFromBranch(t, e, "tiny")
	c := tinyModel(catalog.CanaryName("tiny", movedCommit))
	c.Canary, c.Aliases = &catalog.Canary{Of: "tiny", Share: 0.25}, nil
	c.Origin = &catalog.Origin{Repo: "test/tiny-GGUF", Revision: movedCommit, Ref: "main", RefKind: hf.RefBranch}
	if err := e.catalog.Add(context.Background(), c, "test"); err != nil {
		t.Fatal(err)
	}
	doc := mustStatus(t, e.signedIn().get("/catalog"), http.StatusOK)
	row := doc.Find(`[data-testid="model-row"][data-model="tiny@b2b2b2b"]`)
	if got := row.Find(`[data-testid="trial"]`).Text(); got != "new version of tiny on trial: 25% of its requests" {
		t.Errorf("the canary's row says %q", got)
	}
	if row.Find(`[data-testid="playground-link"]`).Length() != 0 || doc.Find(`[data-testid="call-it"][data-model="tiny@b2b2b2b"]`).Length() != 0 {
		t.Error("the canary is offered to clients: a playground or a Call it")
	}
	if doc.Find(`[data-testid="call-it"][data-model="tiny"]`).Length() != 1 {
		t.Error("tiny itself lost its Call it")
	}
}

// TestUpdatePageAfterItsVerdict: once an update is promoted the page says
// so, in its words and with its own mark, and that the model runs the new
// commit, not the old; a rolled back one says the model kept its commit.
func TestUpdatePageAfterItsVerdict(t *testing.T) {
	e := newConsoleEnv(t)
	ctx := context.Background()
	servedFromBranch(t, e, "tiny")
	servedFromBranch(t, e, "steady")
	b := e.signedIn()
	for _, name := range []string{"tiny", "steady"} {
		moveBranch(e, name)
		resp := b.post("/catalog/"+name+"/check", nil)
		resp.Body.Close()
	}
	// tiny's update (1) promoted: tiny runs the new commit; steady's (2)
	// rolled back.
	m, _ := e.catalog.Get(ctx, "tiny")
	m.Origin.Revision = movedCommit
	if err := e.catalog.Add(ctx, m, "test"); err != nil {
		t.Fatal(err)
	}
	if err := e.updates.SetState(ctx, 1, updates.StatePromoted); err != nil {
		t.Fatal(err)
	}
	if err := e.updates.SetState(ctx, 2, updates.StateRolledBack); err != nil {
		t.Fatal(err)
	}

	page := mustStatus(t, b.get("/updates/1"), http.StatusOK)
	state := page.Find(`[data-testid="state"] .state`)
	if got := strings.TrimSpace(state.Text()); got != "✓ promoted" || !state.HasClass("state-promoted") {
		t.Errorf("the promoted update's state reads %q (class %q)", got, state.AttrOr("class", ""))
	}
	if got := page.Find(`[data-testid="note"]`).Text(); got != "Promoted: tiny runs "+movedCommit[:7]+" now, in place of "+servedCommit[:7]+"." {
		t.Errorf("the promoted update's note: %q", got)
	}
	if got := page.Find(`[data-testid="update"]`).Text(); strings.Contains(got, "what the model runs") || !strings.Contains(got, "what it runs since the promotion") {
		t.Errorf("the promoted update still says the old commit is what the model runs: %q", got)
	}
	if page.Find(`form[data-testid="try-update"]`).Length() != 0 {
		t.Error("a promoted update is offered to be tried")
	}

	page = mustStatus(t, b.get("/updates/2"), http.StatusOK)
	if got := strings.TrimSpace(page.Find(`[data-testid="state"]`).Text()); got != "↺ rolled back" {
		t.Errorf("the rolled back update's state reads %q", got)
	}
	if got := page.Find(`[data-testid="note"]`).Text(); got != "Rolled back: steady kept "+servedCommit[:7]+"; the job that tried "+movedCommit[:7]+" says why." {
		t.Errorf("the rolled back update's note: %q", got)
	}
}

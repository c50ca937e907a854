//go:build e2e

package e2e

import (
	"net/url"
	"testing"

	"github.com/playwright-community/playwright-go"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// TestSignedOut: every console page sends someone not signed in to the
// sign-in page, and signing in brings them back to it; so does a session
// that ends while a page is open, and signing out.
func TestSignedOut(t *testing.T) {
	e := setup(t)
	const repo = "acme/Tiny-GGUF"
	e.hub.AddRepo(repo, hubtest.RepoOptions{})
	e.hub.AddFile(repo, "Tiny-Q8_0.gguf", ggufgen.Bytes(ggufgen.Spec{}))
	// A job, for a job page to be sent back to; started by a script.
	var job apiJob
	e.srv.api("POST", "/api/v1/serve", map[string]any{"repo": repo, "replicas": 0}, &job)

	for _, c := range []struct{ name, path, back string }{
		{"jobs", "/jobs", "/jobs"},
		{"job", "/jobs/" + job.ID, "/jobs/" + job.ID},
		{"serve", "/serve", "/serve"},
		{"serve with a repository", "/serve?repo=" + url.QueryEscape(repo), "/serve?repo=" + url.QueryEscape(repo)},
		{"catalog", "/catalog", "/catalog"},
		{"mirror", "/mirror", "/mirror"},
		{"fleet", "/fleet", "/fleet"},
		{"home", "/", "/jobs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := e.newTab(t) // a context of its own: no session
			defer tb.ctx.Close()
			_, err := tb.page.Goto(c.path)
			tb.must(err, "opening %s", c.path)
			want := "/login"
			if c.path != "/" {
				want += "?next=" + url.QueryEscape(c.path)
			}
			if got := tb.path(); got != want {
				t.Fatalf("opening %s signed out landed on %s; want %s", c.path, got, want)
			}
			tb.signIn()
			if got := tb.path(); got != c.back {
				t.Errorf("after signing in: at %s; want %s", got, c.back)
			}
		})
	}

	// A session that ends while the serve page is open: the next thing the
	// page asks for sends the operator to sign in, and back to the page.
	tb := e.newTab(t)
	tb.open("/serve")
	tb.must(tb.ctx.ClearCookies(), "ending the session")
	tb.typeRepo(repo)
	tb.atPath("/login?next="+url.QueryEscape("/serve"), "sent to sign in from the open serve page")
	tb.signIn()
	tb.atPath("/serve", "back on the serve page")

	// Signing out ends it: the pages send to sign in again.
	tb.must(tb.page.GetByRole("button", playwright.PageGetByRoleOptions{Name: "Sign out"}).Click(), "pressing Sign out")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=login-form]")).ToBeVisible(), "the sign-in form after signing out")
	_, err := tb.page.Goto("/catalog")
	tb.must(err, "opening the catalog")
	if got, want := tb.path(), "/login?next="+url.QueryEscape("/catalog"); got != want {
		t.Errorf("after signing out, the catalog sent to %s; want %s", got, want)
	}
}

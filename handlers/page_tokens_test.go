package handlers_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"modelserve/handlers"
	"modelserve/internal/auth"
)

// TestTokensPage is the tokens page as an operator uses it: make a token
// limited to a model, see it once with a copy button, find it listed
// (never the token), use it at the gateway and not at the API, and revoke
// it, after which it is refused; bad input is said beside the form and
// makes nothing.
func TestTokensPage(t *testing.T) {
	e := newConsoleEnv(t, func(d *handlers.Deps) { d.DataDir = "/srv/modelserve" })
	b := e.signedIn()

	doc := mustStatus(t, b.get("/tokens"), http.StatusOK)
	if doc.Find(`nav a[href="/tokens"]`).Length() != 1 {
		t.Error("the top bar has no link to the tokens page")
	}
	if doc.Find(`[data-testid="empty"]`).Length() != 1 || doc.Find(`[data-testid="new-token"]`).Length() != 0 {
		t.Error("a page with no tokens shows no 'no tokens', or shows a token")
	}
	if got := doc.Find(`[data-testid="token-command"]`).Text(); !strings.HasPrefix(got, "modelserve token create --data /srv/modelserve ") {
		t.Errorf("the command line given is %q, want it to name the data directory", got)
	}

	resp := b.post("/tokens", url.Values{"name": {"app"}, "scope": {"all"}, "models": {"tiny, embed"}})
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("the page holding a new token is cached: Cache-Control %q", cc)
	}
	doc = mustStatus(t, resp, http.StatusOK)
	tok := doc.Find(`[data-testid="new-token"]`).Text()
	// One snippet with the server's address beside the token, and one
	// Copy button, in the snippet, so that static/app.js adds none.
	panel := doc.Find(`[data-testid="new-token-panel"]`)
	if !strings.HasPrefix(tok, "ms_") || panel.Find(`button`).Length() != 1 || panel.Find(`pre > button.copy[data-testid="copy-token"]`).Length() != 1 ||
		panel.Find(`pre`).Length() != 1 {
		t.Fatalf("the new token %q is not shown in one snippet with one Copy button: %s", tok, panel.Text())
	}
	if got, want := panel.Find(`pre code`).Text(), "export MODELSERVE_URL="+e.srv.URL+"\nexport MODELSERVE_TOKEN="+tok; got != want {
		t.Errorf("the snippet reads %q, want %q", got, want)
	}
	row := doc.Find(`[data-testid="token-row"][data-name="app"]`)
	if got := texts(row.Find("td")); len(got) < 5 || got[1] != "gateway" || got[2] != "tiny, embed" || got[4] != "never" {
		t.Errorf("app's row: %q, want the gateway, tiny and embed, never used", got)
	}
	// Made today, said as every time on the console is: in UTC.
	if got := row.Find(`[data-label="Made"]`).Text(); !strings.HasSuffix(got, " UTC") {
		t.Errorf("app was made at %q, not a time in UTC", got)
	}
	// Revoke asks first: with JavaScript by hx-confirm, whose answer
	// the form carries; without, on a page of its own.
	revoke := row.Find(`form[action="/tokens/app/revoke"]`)
	if !strings.HasPrefix(revoke.AttrOr("hx-confirm", ""), "Revoke app?") || !strings.Contains(revoke.AttrOr("hx-vals", ""), `"confirm":"yes"`) {
		t.Errorf("Revoke does not ask first: hx-confirm %q, hx-vals %q", revoke.AttrOr("hx-confirm", ""), revoke.AttrOr("hx-vals", ""))
	}
	if strings.Contains(mustStatus(t, b.get("/tokens"), http.StatusOK).Text(), tok) {
		t.Error("the token is shown again after the page that made it")
	}

	who, err := auth.NewTokens(e.db).Check(t.Context(), tok)
	if err != nil || who.Name != "app" || who.API() || !who.MayUse("tiny") || who.MayUse("other") {
		t.Errorf("the token made works as %+v, %v; want app, for the gateway, tiny and embed only", who, err)
	}

	for _, tc := range []struct {
		name string
		form url.Values
		want string
	}{
		{"a taken name", url.Values{"name": {"app"}, "scope": {"all"}}, "already exists"},
		{"a bad name", url.Values{"name": {"no spaces"}, "scope": {"all"}}, "is not a token name"},
		{"a bad scope", url.Values{"name": {"x"}, "scope": {"root"}}, "is not a token scope"},
		{"a bad model", url.Values{"name": {"x"}, "scope": {"gateway"}, "models": {"Not A Model"}}, "is not a model name"},
		{"too many models", url.Values{"name": {"x"}, "scope": {"gateway"}, "models": {strings.Repeat("m,", 101)}}, "at most 100 models"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := mustStatus(t, b.post("/tokens", tc.form), http.StatusBadRequest)
			if got := doc.Find(`[data-testid="token-error"]`).Text(); !strings.Contains(got, tc.want) {
				t.Errorf("the form says %q, want %q", got, tc.want)
			}
			if doc.Find(`[data-testid="new-token"]`).Length() != 0 {
				t.Error("a token is shown for a form that was refused")
			}
			if got := doc.Find(`input[name="name"]`).AttrOr("value", ""); got != tc.form.Get("name") {
				t.Errorf("the form lost its name: %q", got)
			}
		})
	}
	if n := doc.Find(`[data-testid="token-row"]`).Length(); n != 1 {
		t.Errorf("%d tokens after the refusals, want app alone", n)
	}

	// Without the session's CSRF token nothing is made.
	if resp := b.post("/tokens", url.Values{"name": {"sneaky"}, "csrf": {"forged"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a forged form: %s", resp.Status)
	}

	ask := mustStatus(t, b.post("/tokens/app/revoke", nil), http.StatusOK)
	if ask.Find(`[data-testid="confirm"] form[action="/tokens/app/revoke"] input[name="confirm"][value="yes"]`).Length() != 1 {
		t.Error("revoking without JavaScript does not ask first")
	}
	if _, err := auth.NewTokens(e.db).Check(t.Context(), tok); err != nil {
		t.Errorf("asking whether to revoke revoked the token: %v", err)
	}
	resp = b.post("/tokens/app/revoke", url.Values{"confirm": {"yes"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/tokens?revoked=app" {
		t.Fatalf("revoke: %s to %q", resp.Status, resp.Header.Get("Location"))
	}
	doc = mustStatus(t, b.get("/tokens?revoked=app"), http.StatusOK)
	if !strings.Contains(doc.Find(`[data-testid="notice"]`).Text(), "app was revoked") || doc.Find(`[data-testid="token-row"]`).Length() != 0 {
		t.Error("after revoking app the page does not say so, or still lists it")
	}
	if _, err := auth.NewTokens(e.db).Check(t.Context(), tok); err == nil {
		t.Error("a revoked token still works")
	}
	mustStatus(t, b.post("/tokens/app/revoke", url.Values{"confirm": {"yes"}}), http.StatusNotFound)
}

package handlers_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"modelserve/handlers"
)

// consoleRoutes are every console route behind the session.
var consoleRoutes = []struct{ method, path string }{
	{"GET", "/"},
	{"GET", "/serve"},
	{"GET", "/serve/report?repo=a/b"},
	{"GET", "/serve/memory?repo=a/b"},
	{"POST", "/serve"},
	{"GET", "/jobs"},
	{"GET", "/jobs?page=2"},
	{"GET", "/jobs/stream"},
	{"GET", "/jobs/serve-1-00"},
	{"GET", "/jobs/serve-1-00/stream"},
	{"POST", "/jobs/serve-1-00/cancel"},
	{"POST", "/jobs/serve-1-00/retry"},
	{"GET", "/catalog"},
	{"POST", "/catalog/tiny/remove"},
	{"GET", "/mirror"},
	{"POST", "/mirror"},
	{"GET", "/fleet"},
	{"POST", "/logout"},
}

func TestSignInRequired(t *testing.T) {
	e := newConsoleEnv(t)
	b := e.browser()
	for _, r := range consoleRoutes {
		t.Run(r.method+" "+r.path, func(t *testing.T) {
			resp := b.do(r.method, r.path, url.Values{}, nil)
			resp.Body.Close()
			want := "/login"
			if r.method == "GET" && r.path != "/" {
				want += "?next=" + url.QueryEscape(r.path)
			}
			if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != want {
				t.Fatalf("%s, Location %q; want 303 to %s", resp.Status, resp.Header.Get("Location"), want)
			}
		})
	}

	// What htmx asks for is a piece of a page: it is told to load the
	// sign-in page whole, back to the page it was on.
	t.Run("htmx fragment", func(t *testing.T) {
		resp := b.get("/serve/report?repo=a/b", "HX-Request", "true", "HX-Current-URL", e.srv.URL+"/serve?repo=a/b")
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("HX-Redirect") != "/login?next="+url.QueryEscape("/serve?repo=a/b") {
			t.Fatalf("%s, HX-Redirect %q", resp.Status, resp.Header.Get("HX-Redirect"))
		}
	})

	for _, path := range []string{"/login", "/healthz", "/metrics", "/static/app.css"} {
		t.Run("open "+path, func(t *testing.T) {
			resp := b.get(path)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s without signing in: %s, want 200", path, resp.Status)
			}
		})
	}
}

func TestSignInAndOut(t *testing.T) {
	e := newConsoleEnv(t)
	b := e.browser()
	resp := b.signIn(testUser, testPassword, "")
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("sign-in: %s to %q", resp.Status, resp.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "modelserve_session" {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteLaxMode || cookie.Secure {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Lax, not Secure over plain HTTP", cookie)
	}
	doc := mustStatus(t, b.get("/jobs"), http.StatusOK)
	if got := doc.Find(`[data-testid="user"]`).Text(); !strings.Contains(got, testUser) {
		t.Fatalf("the top bar says %q, want the user's name", got)
	}
	if doc.Find(`nav a[aria-current="page"]`).Text() != "Jobs" {
		t.Fatal("the top bar does not mark the page it is on")
	}
	b.csrf = doc.Find(`form[action="/logout"] input[name="csrf"]`).AttrOr("value", "")

	resp = b.post("/logout", nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
		t.Fatalf("sign-out: %s to %q", resp.Status, resp.Header.Get("Location"))
	}
	resp = b.get("/jobs")
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("after signing out, /jobs answered %s; want the sign-in page", resp.Status)
	}
}

func TestSecureCookieBehindAProxy(t *testing.T) {
	e := newConsoleEnv(t, func(d *handlers.Deps) { d.Secure = true })
	resp := e.browser().get("/login")
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == "modelserve_session" && !c.Secure {
			t.Fatal("with Deps.Secure the session cookie is not Secure")
		}
	}
}

func TestCSRF(t *testing.T) {
	e := newConsoleEnv(t)
	b := e.signedIn()
	other := e.signedIn()
	const sentence = "this form has expired or did not come from this console: reload the page and try again"
	cases := []struct {
		name   string
		form   url.Values
		header []string
	}{
		{"no token", url.Values{"csrf": {""}}, nil},
		{"a wrong token", url.Values{"csrf": {"forged"}}, nil},
		{"another session's token", url.Values{"csrf": {other.csrf}}, nil},
		{"a wrong header", url.Values{"csrf": {""}}, []string{"X-CSRF-Token", "forged"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.form
			resp := b.do(http.MethodPost, "/catalog/tiny/remove", req, tc.header)
			doc := mustStatus(t, resp, http.StatusForbidden)
			if got := doc.Find(`[role="alert"]`).Text(); got != sentence {
				t.Fatalf("refusal says %q", got)
			}
		})
	}
	// The header htmx sends is as good as the form's field.
	resp := b.do(http.MethodPost, "/catalog/tiny/remove", url.Values{"csrf": {""}}, []string{"X-CSRF-Token", b.csrf})
	resp.Body.Close()
	if resp.StatusCode == http.StatusForbidden {
		t.Fatal("a request with the token in X-CSRF-Token was refused")
	}
	// Signing in needs the sign-in page's token too.
	resp = e.browser().do(http.MethodPost, "/login", url.Values{"name": {testUser}, "password": {testPassword}}, nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("sign-in without the page's token: %s, want 403", resp.Status)
	}
}

func TestSignInThrottle(t *testing.T) {
	e := newConsoleEnv(t)
	b := e.browser()
	for i := 1; i <= 5; i++ {
		doc := mustStatus(t, b.signIn(testUser, "wrong password", ""), http.StatusUnauthorized)
		if got := doc.Find(`[role="alert"]`).Text(); !strings.Contains(got, "do not match") {
			t.Fatalf("failure %d says %q", i, got)
		}
		// The name kept, the focus on the password to type again.
		if _, on := doc.Find(`#login-password`).Attr("autofocus"); !on || doc.Find(`#login-name`).AttrOr("value", "") != testUser {
			t.Errorf("after failure %d the focus is not on the password beside the name kept", i)
		}
		if _, on := doc.Find(`#login-name`).Attr("autofocus"); on {
			t.Errorf("after failure %d the focus is on the name, typed already", i)
		}
	}
	// The sixth attempt from the same address is refused even with the
	// right password, for the first step of the backoff.
	resp := b.signIn(testUser, testPassword, "")
	if resp.Header.Get("Retry-After") != "30" {
		t.Errorf("Retry-After %q on a refused sign-in, want 30", resp.Header.Get("Retry-After"))
	}
	doc := mustStatus(t, resp, http.StatusTooManyRequests)
	if got := doc.Find(`[role="alert"]`).Text(); got != "too many attempts; wait 30 seconds and try again" {
		t.Fatalf("the sixth attempt says %q", got)
	}
	if !strings.Contains(e.logs.String(), "too many failures") {
		t.Error("the refusal was not logged")
	}
}

func TestSignInThrottlePerAddress(t *testing.T) {
	e := newConsoleEnv(t)
	b := e.browser()
	for i := 0; i < 10; i++ {
		resp := b.signIn("nobody-"+string(rune('a'+i)), "wrong password", "")
		resp.Body.Close()
	}
	// Ten names guessed from one address: the address waits, whatever
	// name it tries next.
	resp := b.signIn(testUser, testPassword, "")
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("after ten failures from one address: %s, want 429", resp.Status)
	}
}

func TestSignInGoesWhereTheUserWasGoing(t *testing.T) {
	e := newConsoleEnv(t)
	cases := []struct {
		name, next, want string
	}{
		{"a page", "/catalog", "/catalog"},
		{"a page with a query", "/jobs?page=2", "/jobs?page=2"},
		{"none", "", "/"},
		{"another site, scheme-relative", "//evil.example/x", "/"},
		{"another site, absolute", "https://evil.example/x", "/"},
		{"another site, backslash", `/\evil.example`, "/"},
		{"a script", "javascript:alert(1)", "/"},
		{"not a path", "catalog", "/"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := e.browser().signIn(testUser, testPassword, tc.next)
			resp.Body.Close()
			if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != tc.want {
				t.Fatalf("next %q: %s to %q, want %q", tc.next, resp.Status, resp.Header.Get("Location"), tc.want)
			}
		})
	}

	// The whole way: sent to sign in from a page, and back to it.
	b := e.browser()
	resp := b.get("/catalog")
	resp.Body.Close()
	loc, _ := url.Parse(resp.Header.Get("Location"))
	resp = b.signIn(testUser, testPassword, loc.Query().Get("next"))
	resp.Body.Close()
	if resp.Header.Get("Location") != "/catalog" {
		t.Fatalf("after signing in from /catalog: sent to %q", resp.Header.Get("Location"))
	}
}

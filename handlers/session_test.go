package handlers_test

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/netip"
	"net/url"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"modelserve/handlers"
	"modelserve/internal/auth"
)

// copyOf is another browser holding a copy of b's cookies: a cookie lifted
// from a shared machine or a log.
func (b *browser) copyOf() *browser {
	b.t.Helper()
	u, _ := url.Parse(b.e.srv.URL)
	c := b.e.browser()
	jar, _ := cookiejar.New(nil)
	jar.SetCookies(u, b.c.Jar.Cookies(u))
	c.c.Jar = jar
	c.csrf = b.csrf
	return c
}

// from makes every request of b say, through X-Forwarded-For, that it came
// from addr: a client behind the proxy at 127.0.0.1.
func (b *browser) from(addr string) *browser {
	b.c.Transport = headerTransport{name: "X-Forwarded-For", value: addr}
	return b
}

type headerTransport struct{ name, value string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.name, h.value)
	return http.DefaultTransport.RoundTrip(r)
}

// signedOut checks that b, once signed in, is sent to sign in again: a
// page redirects to the sign-in page, a fragment answers 401.
func signedOut(t *testing.T, b *browser, why string) {
	t.Helper()
	resp := b.get("/jobs")
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("%s, /jobs answered %s; want the sign-in page", why, resp.Status)
	}
	if loc, _ := url.Parse(resp.Header.Get("Location")); loc.Path != "/login" {
		t.Fatalf("%s, /jobs sent to %q; want the sign-in page", why, resp.Header.Get("Location"))
	}
	resp = b.get("/jobs", htmx...)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("%s, a fragment answered %s; want 401", why, resp.Status)
	}
}

func TestSignOutEndsEveryCopyOfTheSession(t *testing.T) {
	e := newConsoleEnv(t)
	b := e.signedIn()
	stolen, stolenToo := b.copyOf(), b.copyOf()
	mustStatus(t, stolen.get("/jobs"), http.StatusOK)

	resp := b.post("/logout", nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out: %s", resp.Status)
	}
	// A form posted with a copy and its CSRF token is sent to sign in,
	// not done.
	resp = stolenToo.post("/catalog/tiny/remove", nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
		t.Fatalf("a post with a copy of the signed-out cookie: %s to %q, want the sign-in page", resp.Status, resp.Header.Get("Location"))
	}
	signedOut(t, stolen, "after signing out, a copy of the cookie taken before")
	var n int
	if err := e.db.QueryRow(`SELECT COUNT(*) FROM sessions`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d sessions left after signing out (%v)", n, err)
	}
}

func TestPasswordChangeAndRemovalEndSessions(t *testing.T) {
	ctx := context.Background()
	e := newConsoleEnv(t)
	users := auth.NewUsers(e.db)

	b, other := e.signedIn(), e.signedIn()
	if n, err := users.SetPassword(ctx, testUser, "another long password"); err != nil || n != 2 {
		t.Fatalf("password change revoked %d sessions (%v), want both", n, err)
	}
	signedOut(t, b, "after a password change")
	signedOut(t, other, "after a password change, the other session")

	// The new password works; removing the user ends that session too.
	hash, _ := bcrypt.GenerateFromPassword([]byte(testPassword), bcrypt.MinCost)
	if _, err := e.db.Exec(`UPDATE users SET password_hash = ? WHERE name = ?`, string(hash), testUser); err != nil {
		t.Fatal(err)
	}
	b = e.signedIn()
	if _, err := users.Remove(ctx, testUser); err != nil {
		t.Fatal(err)
	}
	signedOut(t, b, "after the user was removed")
}

func TestSessionIsAServerRow(t *testing.T) {
	e := newConsoleEnv(t)
	b := e.browser()
	b.c.Transport = headerTransport{name: "User-Agent", value: "test-browser/1.0"}
	resp := b.signIn(testUser, testPassword, "")
	resp.Body.Close()
	list, err := auth.NewSessions(e.db).List(context.Background(), testUser)
	if err != nil || len(list) != 1 {
		t.Fatalf("sessions of %s: %+v, %v; want the one just started", testUser, list, err)
	}
	if s := list[0]; s.UserAgent != "test-browser/1.0" || s.Address != "127.0.0.1" || s.Expires.Sub(s.Created).Hours() != 7*24 {
		t.Fatalf("session %+v: want the browser, its address and a week", s)
	}
	// Revoking it from elsewhere (the CLI) signs the browser out.
	if err := auth.NewSessions(e.db).Revoke(context.Background(), list[0].ID); err != nil {
		t.Fatal(err)
	}
	signedOut(t, b, "after its session was revoked")
}

func TestSignInFromTwoAddresses(t *testing.T) {
	cases := []struct {
		name    string
		trusted []netip.Prefix
		// wantOther is the answer to the right password from the
		// second address.
		wantOther int
	}{
		// Behind a trusted proxy each client is its own address: a
		// stranger's guesses do not lock the operator out.
		{"behind a trusted proxy", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, http.StatusSeeOther},
		// From anyone else X-Forwarded-For is a claim, not an address:
		// a guesser cannot dodge the throttle by making one up.
		{"forwarded headers from an untrusted peer", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, http.StatusTooManyRequests},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newConsoleEnv(t, func(d *handlers.Deps) { d.TrustedProxies = tc.trusted })
			stranger := e.browser().from("192.0.2.66")
			for range 5 {
				mustStatus(t, stranger.signIn(testUser, "a wrong guess", ""), http.StatusUnauthorized)
			}
			resp := stranger.signIn(testUser, testPassword, "")
			resp.Body.Close()
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("the guessing address, with the right password: %s, want 429", resp.Status)
			}
			resp = e.browser().from("198.51.100.7").signIn(testUser, testPassword, "")
			resp.Body.Close()
			if resp.StatusCode != tc.wantOther {
				t.Fatalf("the operator from another address: %s, want %d", resp.Status, tc.wantOther)
			}
		})
	}
}

func TestSecureCookieFromATrustedProxy(t *testing.T) {
	cases := []struct {
		name    string
		trusted string
		proto   string
		secure  bool
	}{
		{"https from the trusted proxy", "127.0.0.1/32", "https", true},
		{"http from the trusted proxy", "127.0.0.1/32", "http", false},
		{"https claimed by another peer", "10.0.0.0/8", "https", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newConsoleEnv(t, func(d *handlers.Deps) {
				d.TrustedProxies = []netip.Prefix{netip.MustParsePrefix(tc.trusted)}
			})
			b := e.browser()
			b.c.Transport = headerTransport{name: "X-Forwarded-Proto", value: tc.proto}
			resp := b.get("/login")
			resp.Body.Close()
			var found bool
			for _, c := range resp.Cookies() {
				if c.Name == "modelserve_session" {
					found = true
					if c.Secure != tc.secure {
						t.Fatalf("session cookie Secure=%v, want %v", c.Secure, tc.secure)
					}
				}
			}
			if !found {
				t.Fatal("no session cookie on the sign-in page")
			}
		})
	}
}

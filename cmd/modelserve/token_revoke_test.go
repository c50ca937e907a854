package main

import (
	"net/http"
	"net/url"
	"testing"
)

// TestATokenRevokedInTheConsoleIsRefusedAtOnce: the gateway keeps a token
// that passed for a while (a second) rather than read it for each
// request; a token revoked from the console is refused by its very next
// request all the same, where it was let through for up to that while.
func TestATokenRevokedInTheConsoleIsRefusedAtOnce(t *testing.T) {
	dir := madeDataDir(t)
	mustRun(t, "a long password\n", "user", "add", "--data", dir, "ada")
	tok := apiToken(t, dir, "ci")
	s := startServe(t, config{Data: dir})
	base := "http://" + s.addr
	models := func() int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	b := newConsole(t, base, nil)
	b.signIn("ada", "a long password")
	b.page("/tokens")

	if code := models(); code != http.StatusOK {
		t.Fatalf("GET /v1/models with the token: %d", code)
	}
	resp := b.do("POST", "/tokens/ci/revoke", url.Values{"csrf": {b.csrf}, "confirm": {"yes"}}) // as the confirmed form sends it
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoking from the console: %s", resp.Status)
	}
	if code := models(); code != http.StatusUnauthorized {
		t.Errorf("the gateway answered %d to the token just revoked, want 401", code)
	}
}

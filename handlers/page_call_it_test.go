package handlers_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"modelserve/handlers"
)

// TestTokenCommandsNameTheDataDirectory: a token made in another folder's
// database is one the server answers 401, so the command the panels give
// and the 401 sentences name the server's data directory, quoted for a
// shell when it needs it.
func TestTokenCommandsNameTheDataDirectory(t *testing.T) {
	const dir = "/srv/model serve/data"
	const want = "modelserve token create --data '/srv/model serve/data'"
	e := newPlaygroundEnv(t, &fakeGateway{}, func(d *handlers.Deps) { d.DataDir = dir })
	doc := mustStatus(t, e.signedIn().get("/catalog/tiny/playground"), http.StatusOK)
	if got := doc.Find(`[data-testid="call-token"]`).Text(); got != want+" --models tiny my-app" {
		t.Errorf("the panel's token command is %q, want %q", got, want+" --models tiny my-app")
	}
	if doc.Find(`[data-testid="call-tokens-page"][href="/tokens"]`).Length() != 1 {
		t.Error("the panel does not point to the Tokens page")
	}

	for _, tc := range []struct{ name, header string }{
		{"no token", ""},
		{"a wrong token", "Bearer ms_not-a-token-anyone-made"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/api/v1/jobs", nil)
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct{ Error string }
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
			// It says how, and names the data directory, but not where it
			// is: this answer goes to anyone.
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body.Error, "modelserve token create --data DIR NAME, DIR being the server's data directory") ||
				strings.Contains(body.Error, dir) || !strings.Contains(body.Error, "Tokens page") {
				t.Errorf("%d %q, want 401 saying how to make a token, without the server's path", resp.StatusCode, body.Error)
			}
		})
	}
}

//go:build e2e

package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// TestTokensPage: an operator makes an API token in the console for one
// model and the gateway alone; it is shown once, with a Copy button that
// puts it on the clipboard whole; it reaches that model through the
// gateway and nothing else; the list shows it, never again the token
// itself; Revoke ends it.
func TestTokensPage(t *testing.T) {
	e := setup(t)
	const repo = "acme/Chatty-GGUF"
	e.hub.AddRepo(repo, hubtest.RepoOptions{})
	e.hub.AddFile(repo, "Chatty-Q8_0.gguf", ggufgen.Bytes(ggufgen.Spec{}))
	for _, name := range []string{"chatty", "other"} {
		var job apiJob
		e.srv.api("POST", "/api/v1/serve", map[string]any{"repo": repo, "name": name, "replicas": 0}, &job)
		if err := poll(jobLimit, func() bool {
			job = e.srv.job(job.ID)
			return job.State != "running"
		}); err != nil || job.State != "done" {
			t.Fatalf("serving %s: %s %s", name, job.State, job.Error)
		}
	}
	// call is GET path with tok: its status and the models it lists.
	call := func(path, tok string) (int, []string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var list struct{ Data []struct{ ID string } }
		json.NewDecoder(resp.Body).Decode(&list)
		var ids []string
		for _, m := range list.Data {
			ids = append(ids, m.ID)
		}
		return resp.StatusCode, ids
	}

	tb := e.newTab(t)
	tb.open("/tokens")
	form := tb.loc("[data-testid=token-form]")
	tb.must(form.GetByLabel("Name").Fill("my-app"), "typing the token's name")
	_, err := form.GetByLabel("Reaches").SelectOption(playwright.SelectOptionValues{Values: &[]string{"gateway"}})
	tb.must(err, "choosing the gateway alone")
	tb.must(form.GetByLabel("Models").Fill("chatty"), "naming the model")
	tb.must(form.GetByRole("button", playwright.LocatorGetByRoleOptions{Name: "Make the token"}).Click(), "pressing Make the token")

	shown := tb.loc("[data-testid=new-token]")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=new-token-panel]")).ToContainText("shown only this once"), "the token shown once")
	token, err := shown.InnerText()
	tb.must(err, "reading the token")
	token = strings.TrimSpace(token)
	if !strings.HasPrefix(token, "ms_") {
		t.Fatalf("the token shown is %q", token)
	}
	// One Copy button, which copies the server's address and the token
	// as a shell takes them.
	panel := tb.loc("[data-testid=new-token-panel]")
	if n, _ := panel.GetByRole("button", playwright.LocatorGetByRoleOptions{Name: "Copy"}).Count(); n != 1 {
		t.Errorf("the new token has %d Copy buttons, want one", n)
	}
	tb.must(tb.page.Context().GrantPermissions([]string{"clipboard-read", "clipboard-write"}), "letting the page use the clipboard")
	copyButton := tb.loc("[data-testid=copy-token]")
	tb.must(copyButton.Click(), "pressing Copy")
	tb.must(tb.expect().Locator(copyButton).ToHaveText("Copied"), "the button saying it copied")
	copied, err := tb.page.Evaluate(`() => navigator.clipboard.readText()`)
	tb.must(err, "reading the clipboard")
	// The address the browser reached the server by.
	if want := "export MODELSERVE_URL=" + e.front.URL + "\nexport MODELSERVE_TOKEN=" + token; copied != want {
		t.Errorf("the clipboard holds %q, want %q", copied, want)
	}

	// It reaches chatty through the gateway, and nothing else.
	if code, ids := call("/v1/models", token); code != http.StatusOK || strings.Join(ids, ",") != "chatty" {
		t.Errorf("the token's /v1/models: %d %v; want chatty alone", code, ids)
	}
	if code, _ := call("/api/v1/jobs", token); code != http.StatusForbidden {
		t.Errorf("the token's /api/v1/jobs: %d; want 403, it reaches the gateway alone", code)
	}

	// Listed, and never shown again.
	tb.open("/tokens")
	row := tb.loc(`[data-testid=token-row][data-name="my-app"]`)
	tb.must(tb.expect().Locator(row.Locator(`[data-label="Reaches"]`)).ToContainText("gateway"), "the list says what it reaches")
	tb.must(tb.expect().Locator(row.Locator(`[data-label="Models"]`)).ToContainText("chatty"), "the list names its model")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=new-token]")).ToHaveCount(0), "the token not shown again")
	if html, _ := tb.page.Content(); strings.Contains(html, token) {
		t.Error("the page holds the token again")
	}

	// Revoke asks first: dismissed, nothing is revoked.
	var asked []string
	answer := false
	tb.page.OnDialog(func(d playwright.Dialog) {
		asked = append(asked, d.Message())
		if answer {
			d.Accept()
		} else {
			d.Dismiss()
		}
	})
	revoke := row.GetByRole("button", playwright.LocatorGetByRoleOptions{Name: "Revoke my-app"})
	tb.must(revoke.Click(), "pressing Revoke, then Cancel")
	time.Sleep(300 * time.Millisecond)
	if len(asked) != 1 || !strings.HasPrefix(asked[0], "Revoke my-app?") {
		t.Errorf("Revoke asked %q; want it to ask whether to revoke my-app", asked)
	}
	if code, _ := call("/v1/models", token); code != http.StatusOK {
		t.Errorf("the token was revoked though the question was dismissed: %d", code)
	}
	tb.must(tb.expect().Locator(row).ToHaveCount(1), "the token still listed")

	// Revoked once confirmed: gone from the list, and refused.
	answer = true
	tb.must(revoke.Click(), "pressing Revoke, then OK")
	tb.must(tb.expect().Locator(row).ToHaveCount(0), "the token gone from the list")
	if err := poll(5*time.Second, func() bool { code, _ := call("/v1/models", token); return code == http.StatusUnauthorized }); err != nil {
		t.Errorf("the revoked token is not refused by the gateway: %v", err)
	}
	if code, _ := call("/api/v1/catalog", e.srv.token); code != http.StatusOK {
		t.Errorf("revoking my-app touched another token: %d", code)
	}
}

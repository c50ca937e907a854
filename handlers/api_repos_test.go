package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"modelserve/handlers"
	"modelserve/internal/auth"
)

func TestAPIRepoAndNodes(t *testing.T) {
	e := newConsoleEnv(t, func(d *handlers.Deps) { d.Pool = poolOf(t, twoNodes) })
	e.reg.add(ggufRepo("test/tiny-GGUF"))
	tok, err := auth.NewTokens(e.db).Create(context.Background(), "ci")
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (*http.Response, map[string]any) {
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp, out
	}
	resp, out := get("/api/v1/repos/test/tiny-GGUF?revision=main")
	if resp.StatusCode != http.StatusOK || out["repo"] != "test/tiny-GGUF" || len(out["sets"].([]any)) != 1 {
		t.Errorf("repo: %s %v", resp.Status, out)
	}
	resp, out = get("/api/v1/repos/test/nothing")
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(out["error"].(string), "test/nothing") {
		t.Errorf("missing repo: %s %v", resp.Status, out)
	}
	for _, q := range []string{"context=lots", "ctx_pool=-1", "context_length=lots"} {
		resp, out = get("/api/v1/repos/test/tiny-GGUF?" + q)
		if name, _, _ := strings.Cut(q, "="); resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(out["error"].(string), name+" is a whole number") {
			t.Errorf("%s: %s %v", q, resp.Status, out)
		}
	}
	resp, out = get("/api/v1/nodes")
	if resp.StatusCode != http.StatusOK || len(out["nodes"].([]any)) != 2 {
		t.Errorf("nodes: %s %v", resp.Status, out)
	}
	// The session does not open the API, nor a token the console.
	resp = e.signedIn().get("/api/v1/nodes")
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the API with a session and no token: %s", resp.Status)
	}
}

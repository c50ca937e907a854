package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/handlers"
	"modelserve/internal/hf"
	"modelserve/jobs"
)

// TestAPromotedModelShowsItsNewVersionsFigures: chatty was served at one
// commit (its smoke test measured 823 tokens/s) and promoted to another
// (the update's smoke test measured 3,276). The catalog row shows the
// speed of the version serving now, and the version history, page and
// API alike, lists both versions with their own figures, the retired one
// with a Serve again button.
func TestAPromotedModelShowsItsNewVersionsFigures(t *testing.T) {
	e := newConsoleEnv(t, func(d *handlers.Deps) { d.Versions = d.Catalog.(*catalog.Store) })
	ctx := context.Background()
	old, moved := strings.Repeat("a1", 20), strings.Repeat("b2", 20)
	for _, commit := range []string{old, moved} {
		m := catalog.Model{Name: "chatty", Source: "/models/chatty.gguf", ContextLength: 2048, Weights: []string{"chatty.gguf"},
			Origin:   &catalog.Origin{Repo: "acme/Chatty-GGUF", Revision: commit, Ref: "main", RefKind: hf.RefBranch},
			Profiles: []catalog.Profile{{Name: "cpu", Engine: "llamacpp", Priority: 100, RAMBytes: 3 << 30}}, Scaling: catalog.Scaling{Min: 1, Max: 1}}
		if err := e.catalog.Add(ctx, m, "test"); err != nil {
			t.Fatal(err)
		}
	}
	served := doneJob("serve-1-chatty", time.Now().Add(-time.Hour))
	served.Model, served.Commit, served.TokensPerSecond = "chatty", old, 823
	mustInsertJob(t, e.db, served)
	promoted := doneJob("update-2-chatty", time.Now().Add(-time.Minute))
	promoted.Kind, promoted.Model, promoted.Commit, promoted.TokensPerSecond = jobs.KindUpdate, catalog.CanaryName("chatty", moved), moved, 3276
	promoted.Request.CanaryOf = "chatty"
	mustInsertJob(t, e.db, promoted)

	b := e.signedIn()
	doc := mustStatus(t, b.get("/catalog"), http.StatusOK)
	if got := doc.Find(`[data-testid="model-row"][data-model="chatty"] [data-testid="speed-measured"]`).Text(); got != "3276 tokens/s measured" {
		t.Errorf("chatty's row, running %s, says %q measured; want the new version's 3276", moved[:7], got)
	}

	page := mustStatus(t, b.get("/catalog/chatty/versions"), http.StatusOK)
	rows := page.Find(`[data-testid="version"]`)
	if rows.Length() != 2 {
		t.Fatalf("the history lists %d versions, want 2", rows.Length())
	}
	cur, was := rows.Eq(0), rows.Eq(1)
	if cur.AttrOr("data-commit", "") != moved || cur.AttrOr("data-state", "") != "current" ||
		!strings.Contains(cur.Find(`[data-testid="version-speed"]`).Text(), "3276 tokens/s measured") ||
		cur.Find(`[data-testid="version-memory"]`).Text() != "needs 3.2 GB" || cur.Find(`[data-testid="restore"]`).Length() != 0 {
		t.Errorf("the current version's row: %q", strings.Join(strings.Fields(cur.Text()), " "))
	}
	if was.AttrOr("data-commit", "") != old || was.AttrOr("data-state", "") != "retired" ||
		!strings.Contains(was.Find(`[data-testid="version-speed"]`).Text(), "823 tokens/s measured") ||
		!strings.Contains(was.Find(`[data-testid="version-reason"]`).Text(), "replaced by "+moved[:7]) ||
		was.Find(`[data-testid="restore"]`).Length() != 1 {
		t.Errorf("the retired version's row: %q", strings.Join(strings.Fields(was.Text()), " "))
	}

	var api struct {
		Versions []struct {
			Commit, State, Restore string
			TokensPerSecond        float64 `json:"tokens_per_second"`
			MemoryBytes            int64   `json:"memory_bytes"`
		}
	}
	resp, raw := newAPIClient(t, e).do("GET", "/api/v1/catalog/chatty/versions", nil)
	if err := json.Unmarshal(raw, &api); err != nil || resp.StatusCode != http.StatusOK || len(api.Versions) != 2 {
		t.Fatalf("the versions API: %d %s", resp.StatusCode, raw)
	}
	if v := api.Versions[0]; v.Commit != moved || v.TokensPerSecond != 3276 || v.MemoryBytes != 3<<30 || v.Restore != "" {
		t.Errorf("the current version through the API: %+v", v)
	}
	if v := api.Versions[1]; v.Commit != old || v.TokensPerSecond != 823 || !strings.HasSuffix(v.Restore, "/restore") {
		t.Errorf("the retired version through the API: %+v", v)
	}
}

package jobs

import (
	"context"
	"encoding/json"
	"testing"

	"modelserve/catalog"
	"modelserve/internal/testkit"
)

// TestAJobWrittenBeforeReadsBackTheSame: a job as the release before the
// size type stored it (its request's "ctx_pool" and "context_length")
// reads back with the same serving size, and its request is written out
// again with the same fields: the API's clients and resumed jobs read
// them.
func TestAJobWrittenBeforeReadsBackTheSame(t *testing.T) {
	db := testkit.OpenDB(t)
	const stored = `{"repo":"acme/Chatty-GGUF","ctx_pool":8192,"context_length":2048,"replicas":1}`
	if _, err := db.Exec(`INSERT INTO jobs (id, kind, state, request, started) VALUES ('j-1', 'serve', 'done', ?, 1)`, stored); err != nil {
		t.Fatal(err)
	}
	j, _, err := load(context.Background(), db, "j-1")
	if err != nil {
		t.Fatal(err)
	}
	if got := j.Request.Size(); got != (catalog.Size{Pool: 8192, Slots: 4}) {
		t.Errorf("the stored request asks for %s, want 8192 tokens in 4 slots of 2048", got.Words())
	}
	out, err := json.Marshal(j.Request)
	if err != nil {
		t.Fatal(err)
	}
	var again, want map[string]any
	if err := json.Unmarshal(out, &again); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(stored), &want); err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		if again[k] != v {
			t.Errorf("the request's %s is written as %v, stored as %v: %s", k, again[k], v, out)
		}
	}
}

package fleet

import (
	"context"
	"encoding/json"
	"testing"

	"modelserve/catalog"
	"modelserve/internal/testkit"
)

// TestAStartWrittenBeforeReadsBackTheSame: an engine start as the release
// before the size type kept it (the columns context and slots) reads back
// with the same serving size, and is written out in the API as it was
// ("context" the pool, "slots"); an engine's load keeps its "slots" and
// "slot_context" the same way.
func TestAStartWrittenBeforeReadsBackTheSame(t *testing.T) {
	db := testkit.OpenDB(t)
	if _, err := db.Exec(`INSERT INTO replica_starts (replica, model, file, context, slots, estimate_bytes, rss_bytes, started_at, ready_at)
		VALUES ('tiny-1', 'tiny', '/m/tiny.gguf', 2048, 2, 1000, 900, '2026-01-02T03:04:05Z', '2026-01-02T03:04:06Z')`); err != nil {
		t.Fatal(err)
	}
	starts, err := NewHistory(db).Recent(context.Background(), 10)
	if err != nil || len(starts) != 1 {
		t.Fatalf("starts %+v, %v", starts, err)
	}
	s := starts[0]
	if s.Size != (catalog.Size{Pool: 2048, Slots: 2}) || s.Replica != "tiny-1" || s.EstimateBytes != 1000 {
		t.Errorf("the stored start reads back as %+v (%s), want 2048 tokens in 2 slots of 1024", s, s.Size.Words())
	}
	sameJSON(t, s, `{"replica":"tiny-1","model":"tiny","file":"/m/tiny.gguf","context":2048,"slots":2,"estimate_bytes":1000,"rss_bytes":900,
		"started":"2026-01-02T03:04:05Z","ready_at":"2026-01-02T03:04:06Z"}`)
	var back Start
	if err := json.Unmarshal(mustJSON(t, s), &back); err != nil || back != s {
		t.Errorf("the start read back from its JSON is %+v (%v), want %+v", back, err, s)
	}

	l := Load{Size: catalog.SizeForSlots(4, 4096), SlotsBusy: 1, Deferred: 2}
	sameJSON(t, l, `{"slots":4,"slots_busy":1,"slot_context":4096,"requests_processing":0,"requests_deferred":2,
		"prompt_tokens_total":0,"prompt_tokens_cached_total":0,"tokens_predicted_total":0,"at":"0001-01-01T00:00:00Z"}`)
	var lb Load
	if err := json.Unmarshal(mustJSON(t, l), &lb); err != nil || lb.Size != l.Size || lb.SlotsBusy != 1 || lb.Deferred != 2 {
		t.Errorf("the load read back from its JSON is %+v (%v), want %+v", lb, err, l)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameJSON fails unless v is written as want, field for field.
func sameJSON(t *testing.T, v any, want string) {
	t.Helper()
	var got, w map[string]any
	if err := json.Unmarshal(mustJSON(t, v), &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(w) {
		t.Errorf("written as %s, want %s", mustJSON(t, v), want)
	}
	for k, x := range w {
		if got[k] != x {
			t.Errorf("%s is written as %v, want %v", k, got[k], x)
		}
	}
}

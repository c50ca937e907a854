package catalog_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"modelserve/catalog"
)

// TestSizeDividesAPoolOnce: a size's context, the slots a pool of a given
// context holds, its bounds and its sentence, for the figures the serve
// form, the plan and the fleet meet.
func TestSizeDividesAPoolOnce(t *testing.T) {
	for _, c := range []struct {
		name  string
		size  catalog.Size
		ctx   int
		words string
		err   bool
	}{
		{"the default pool", catalog.Size{Pool: 16384, Slots: 4}, 4096, "16384 tokens in 4 slots of 4096", false},
		{"one slot", catalog.Size{Pool: 4096, Slots: 1}, 4096, "4096 tokens in one slot", false},
		{"slots unsaid are one", catalog.Size{Pool: 8192}, 8192, "8192 tokens in one slot", false},
		{"unsized", catalog.Size{}, 0, "the engine's own context", false},
		{"an uneven pool leaves the remainder unused", catalog.Size{Pool: 10000, Slots: 3}, 3333, "10000 tokens in 3 slots of 3333", false},
		{"negative", catalog.Size{Pool: -1, Slots: 1}, 0, "", true},
		{"more slots than an engine serves", catalog.Size{Pool: 1 << 20, Slots: catalog.MaxSlots + 1}, (1 << 20) / (catalog.MaxSlots + 1), "", true},
		{"a slot longer than any model", catalog.Size{Pool: catalog.MaxContext * 2, Slots: 1}, catalog.MaxContext * 2, "", true},
		{"more slots than tokens", catalog.Size{Pool: 4, Slots: 8}, 0, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.size.Context(); got != c.ctx {
				t.Errorf("%+v: context %d, want %d", c.size, got, c.ctx)
			}
			if err := c.size.Check(); (err != nil) != c.err {
				t.Errorf("%+v: Check says %v, want an error %v", c.size, err, c.err)
			}
			if c.words != "" && c.size.Words() != c.words {
				t.Errorf("%+v says %q, want %q", c.size, c.size.Words(), c.words)
			}
		})
	}
	if got := catalog.SizeForContext(65536, 4096); got != (catalog.Size{Pool: 65536, Slots: 16}) {
		t.Errorf("a 65536-token pool of 4096-token requests is %+v, want 16 slots", got)
	}
	if got := catalog.SizeForContext(2048, 4096); got != (catalog.Size{Pool: 2048, Slots: 1}) {
		t.Errorf("a pool shorter than one request is %+v, want one slot", got)
	}
	if got := catalog.SizeForSlots(4, 2048); got != (catalog.Size{Pool: 8192, Slots: 4}) {
		t.Errorf("4 slots of 2048 are %+v, want a pool of 8192", got)
	}
}

// TestAnEntryWrittenBeforeReadsBackTheSame: a catalog entry as the
// release before the size type stored it ("pool" and "slots" on each
// profile) reads back with that size, and is written out again with the
// same fields: scripts and stored data read them.
func TestAnEntryWrittenBeforeReadsBackTheSame(t *testing.T) {
	s, db := MustOpen(t)
	const spec = `{"name":"chatty","context_length":2048,"profiles":[` +
		`{"name":"cpu","engine":"llamacpp","pool":8192,"slots":4,"ram_bytes":174205856,"priority":100,"weight":1},` +
		`{"name":"gpu-1xl4","engine":"llamacpp","pool":8192,"slots":4,"gpu_class":"L4","gpus_per_node":1,"card_bytes":1000,"priority":90,"weight":1}],` +
		`"scaling":{"min":0,"max":1},"capabilities":{}}`
	if _, err := db.Exec(`INSERT INTO models (name, class, role, added_by, added_at, spec) VALUES ('chatty', '', '', 'test', ?, ?)`,
		time.Now().UTC().Format(time.RFC3339Nano), spec); err != nil {
		t.Fatal(err)
	}
	m, err := s.Get(context.Background(), "chatty")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Profiles {
		if p.Size != (catalog.Size{Pool: 8192, Slots: 4}) || p.Context() != 2048 {
			t.Errorf("profile %s reads back as %s, want 8192 tokens in 4 slots of 2048", p.Name, p.Size.Words())
		}
	}
	out, err := json.Marshal(m.Profiles)
	if err != nil {
		t.Fatal(err)
	}
	var again, want []map[string]any
	var old struct {
		Profiles []map[string]any `json:"profiles"`
	}
	if err := json.Unmarshal([]byte(spec), &old); err != nil {
		t.Fatal(err)
	}
	want = old.Profiles
	if err := json.Unmarshal(out, &again); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		for k, v := range want[i] {
			if again[i][k] != v {
				t.Errorf("profile %d's %s is written as %v, stored as %v: %s", i, k, again[i][k], v, out)
			}
		}
		if _, ok := again[i]["size"]; ok {
			t.Errorf("profile %d is written with a field the stored entry never had: %s", i, out)
		}
	}
}

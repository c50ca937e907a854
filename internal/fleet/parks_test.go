package fleet

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/ggufgen"
	"modelserve/internal/testkit"
)

// keptParks are the models parked_models holds.
func keptParks(t testing.TB, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query(`SELECT model FROM parked_models ORDER BY model`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var m string
		if err := rows.Scan(&m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// firstLook is model's health once the fleet has first looked at it.
func (tf *testFleet) firstLook(t *testing.T, model string) ModelHealth {
	t.Helper()
	var h ModelHealth
	testkit.WaitFor(t, 10*time.Second, "the fleet's first look at "+model, func() (bool, string) {
		var ok bool
		h, ok = tf.health(model)
		return ok, "no health"
	})
	return h
}

// A model parked because the engine cannot load it stays parked when
// modelserve restarts: a new fleet on the same database does not start it
// three more times, and says why it is parked. Served again, it starts
// afresh, and the park is forgotten.
func TestParkedModelStaysParkedAcrossARestart(t *testing.T) {
	db := testkit.OpenDB(t)
	cat := catalog.NewStore(db)
	first := MustRun(t, cat, Options{Parks: NewParks(db)})
	MustAdd(t, first.notifying(cat), entry("foo", MustWriteModel(t, "foo.gguf", ggufgen.Spec{Architecture: "foo"}), 1))
	testkit.WaitFor(t, 2*readyWithin, "foo parked", func() (bool, string) {
		h, _ := first.health("foo")
		return h.Parked, "health " + h.Reason
	})
	// The park is written just after the fleet says it, by the replica
	// that ended.
	testkit.WaitFor(t, 10*time.Second, "foo's park kept in the database", func() (bool, string) {
		got := keptParks(t, db)
		return len(got) == 1 && got[0] == "foo", fmt.Sprintf("the database keeps the parks of %v, want foo's", got)
	})
	// The process stops. A park kept for a model since removed from the
	// catalog is forgotten at the next start.
	first.stop(t)
	if _, err := db.Exec(`INSERT INTO parked_models (model, fingerprint, reason, failures, parked_at)
		VALUES ('gone', 'x', 'it failed', 3, '2026-01-01T00:00:00Z')`); err != nil {
		t.Fatal(err)
	}

	second := MustRun(t, cat, Options{Parks: NewParks(db)})
	h := second.firstLook(t, "foo")
	if !h.Parked || h.Failures != 3 || !strings.Contains(h.Reason, "unknown model architecture: 'foo'") {
		t.Errorf("after the restart foo's health is %+v, want parked after 3 failures, with the engine's words", h)
	}
	// Parked means no start, look after look: a replica is placed in
	// the look that starts it.
	second.mustSync(t)
	second.mustSync(t)
	if n, rs := len(second.node.started()), second.replicasOf("foo"); n != 0 || len(rs) != 0 {
		t.Errorf("the restarted fleet started the parked model's engine %d times, and has its replicas %s", n, jsonOf(rs))
	}
	if got := keptParks(t, db); len(got) != 1 || got[0] != "foo" {
		t.Errorf("after the restart the database keeps the parks of %v, want foo's alone", got)
	}

	// Served again, with weights that load: a fresh start, and no park
	// left to hold it at the next restart.
	MustAdd(t, second.notifying(cat), entry("foo", MustWriteModel(t, "good.gguf", ggufgen.Spec{}), 1))
	if r := second.waitReady(t, "foo", readyWithin); r.Failures != 0 {
		t.Errorf("the model served again inherited %d failures", r.Failures)
	}
	if got := keptParks(t, db); len(got) != 0 {
		t.Errorf("the model was served again, and the database still keeps the parks of %v", got)
	}
}

// A park kept before both fleets shared one fingerprint (its key of the
// local fleet's form of then) still holds after the upgrade: the model is
// not started again, three more failures and all.
func TestAParkKeptBeforeTheSharedFingerprintHolds(t *testing.T) {
	db := testkit.OpenDB(t)
	cat := catalog.NewStore(db)
	MustAdd(t, cat, entry("foo", MustWriteModel(t, "foo.gguf", ggufgen.Spec{}), 1))
	models, err := cat.List(context.Background())
	if err != nil || len(models) != 1 {
		t.Fatalf("the catalog lists %v: %v", models, err)
	}
	m := models[0]
	if _, err := db.Exec(`INSERT INTO parked_models (model, fingerprint, reason, failures, parked_at)
		VALUES ('foo', ?, 'it failed', 3, '2026-01-01T00:00:00Z')`, parkKey(localFingerprint(m), m.AddedAt)); err != nil {
		t.Fatal(err)
	}
	f := MustRun(t, cat, Options{Parks: NewParks(db)})
	h := f.firstLook(t, "foo")
	if err := f.Sync(context.Background()); err != nil { // and a pass after it
		t.Fatal(err)
	}
	if !h.Parked || h.Reason != "it failed" {
		t.Errorf("after the upgrade foo's health is %+v, want parked for what failed before", h)
	}
	if n := len(f.node.started()); n != 0 {
		t.Errorf("the upgraded fleet started the parked model's engine %d times", n)
	}
	if got := keptParks(t, db); len(got) != 1 {
		t.Errorf("after the upgrade the database keeps the parks of %v, want foo's", got)
	}
}

// keptElsewhere is a ParkStore holding parks as a cluster's owner objects
// do, in memory.
type keptElsewhere struct {
	mu    sync.Mutex
	parks map[string]KeptPark
}

func (k *keptElsewhere) Load(context.Context) (map[string]KeptPark, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.parks), nil
}

func (k *keptElsewhere) Keep(_ context.Context, model string, pk KeptPark) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.parks[model] = pk
	return nil
}

func (k *keptElsewhere) Forget(_ context.Context, models ...string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, m := range models {
		delete(k.parks, m)
	}
	return nil
}

// A park kept before parks named the entry (a cluster's owner annotation
// held its fingerprint alone) holds after the upgrade for that entry, and
// not for a changed one.
func TestAParkKeptByFingerprintAloneHolds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fp     func(catalog.Model) string
		parked bool
	}{
		{"same entry", Fingerprint, true},
		{"entry changed since", func(catalog.Model) string { return "sha256:another" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := testkit.OpenDB(t)
			cat := catalog.NewStore(db)
			MustAdd(t, cat, entry("foo", MustWriteModel(t, "foo.gguf", ggufgen.Spec{}), 1))
			models, err := cat.List(context.Background())
			if err != nil || len(models) != 1 {
				t.Fatalf("the catalog lists %v: %v", models, err)
			}
			store := &keptElsewhere{parks: map[string]KeptPark{"foo": {Fingerprint: tc.fp(models[0]), Reason: "it failed"}}}
			f := MustRun(t, cat, Options{Parks: NewParksIn(store)})
			h := f.firstLook(t, "foo")
			if err := f.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			if h.Parked != tc.parked {
				t.Errorf("after the upgrade foo's health is %+v, want parked %v", h, tc.parked)
			}
			if tc.parked {
				if n := len(f.node.started()); n != 0 {
					t.Errorf("the upgraded fleet started the parked model's engine %d times", n)
				}
				return
			}
			testkit.WaitFor(t, 10*time.Second, "foo's engine started afresh", func() (bool, string) {
				return len(f.node.started()) > 0, "not started"
			})
		})
	}
}

package fleet

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"modelserve/internal/notify"
)

// Parks keeps in SQLite (the table parked_models) the models the fleet
// parked because their engine kept failing to start. Kept in memory only,
// a park ended with the process: after every restart of modelserve a
// model that cannot load was started, and failed, MaxFailures times more.
// A nil *Parks keeps nothing. Another store may keep them (ParkStore):
// a cluster's fleet keeps them on the model's objects there.
type Parks struct {
	db    *sql.DB
	store ParkStore
}

// NewParks keeps parks in db, whose migrations have run.
func NewParks(db *sql.DB) *Parks { return &Parks{db: db} }

// NewParksIn keeps parks in store.
func NewParksIn(store ParkStore) *Parks { return &Parks{store: store} }

// ParkStore keeps parks elsewhere than in SQLite.
type ParkStore interface {
	// Load reads every park, by model.
	Load(ctx context.Context) (map[string]KeptPark, error)
	// Keep records that model is parked, replacing an older park of it.
	Keep(ctx context.Context, model string, pk KeptPark) error
	// Forget deletes the parks of models.
	Forget(ctx context.Context, models ...string) error
}

// KeptPark is one model parked, as kept.
type KeptPark struct {
	// Key names the catalog entry that was parked: an entry served
	// again or changed since is another, and starts afresh.
	Key string
	// Fingerprint, with no Key, is a park kept by a modelserve before
	// parks named the entry (a cluster's owner ConfigMap's
	// "modelserve.io/parked-for"): it holds for the entry whose
	// Fingerprint it is.
	Fingerprint string
	Reason      string
	Failures    int
	At          time.Time
}

// park is one model parked, as kept.
type park struct {
	// key is parkKey of the catalog entry that was parked: an entry
	// served again or changed since is another, and starts afresh.
	key string
	// fingerprint is KeptPark's, for a park kept before keys.
	fingerprint string
	reason      string
	failures    int
	at          time.Time
}

// parkKey names a catalog entry as it was when its model was parked: what
// its engine is started from (fingerprint) and when it was added, since
// serving the same model again is asking for a fresh start, as it is
// while the fleet runs (stateLocked).
func parkKey(fingerprint string, addedAt time.Time) string {
	h := sha256.Sum256([]byte(fingerprint + "\n" + addedAt.UTC().Format(time.RFC3339Nano)))
	return hex.EncodeToString(h[:])
}

// load reads every park, by model.
func (p *Parks) load(ctx context.Context) (map[string]park, error) {
	out := map[string]park{}
	if p == nil {
		return out, nil
	}
	if p.store != nil {
		kept, err := p.store.Load(ctx)
		for name, k := range kept {
			out[name] = park{key: k.Key, fingerprint: k.Fingerprint, reason: k.Reason, failures: k.Failures, at: k.At}
		}
		return out, err
	}
	rows, err := p.db.QueryContext(ctx, `SELECT model, fingerprint, reason, failures, parked_at FROM parked_models`)
	if err != nil {
		return nil, fmt.Errorf("reading the parked models: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			name, at string
			pk       park
		)
		if err := rows.Scan(&name, &pk.key, &pk.reason, &pk.failures, &at); err != nil {
			return nil, fmt.Errorf("reading the parked models: %w", err)
		}
		pk.at, _ = time.Parse(time.RFC3339Nano, at)
		out[name] = pk
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the parked models: %w", err)
	}
	return out, nil
}

// keep records that model is parked, replacing an older park of it.
func (p *Parks) keep(ctx context.Context, model string, pk park) error {
	if p == nil {
		return nil
	}
	if p.store != nil {
		return p.store.Keep(ctx, model, KeptPark{Key: pk.key, Reason: pk.reason, Failures: pk.failures, At: pk.at})
	}
	_, err := p.db.ExecContext(ctx, `INSERT INTO parked_models (model, fingerprint, reason, failures, parked_at)
		VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (model) DO UPDATE SET fingerprint = excluded.fingerprint, reason = excluded.reason,
			failures = excluded.failures, parked_at = excluded.parked_at`,
		model, pk.key, pk.reason, pk.failures, pk.at.UTC().Format(time.RFC3339Nano))
	if err != nil {
		return fmt.Errorf("recording that %s is parked: %w", model, err)
	}
	return nil
}

// forget deletes the parks of models, whose entries changed or left the
// catalog.
func (p *Parks) forget(ctx context.Context, models ...string) error {
	if p == nil || len(models) == 0 {
		return nil
	}
	if p.store != nil {
		return p.store.Forget(ctx, models...)
	}
	args := make([]any, len(models))
	for i, m := range models {
		args[i] = m
	}
	_, err := p.db.ExecContext(ctx, `DELETE FROM parked_models WHERE model IN (?`+strings.Repeat(", ?", len(models)-1)+`)`, args...)
	if err != nil {
		return fmt.Errorf("forgetting the parks of %s: %w", strings.Join(models, ", "), err)
	}
	return nil
}

// keepPark records r's model as parked, when the fleet has just parked it
// for its engine's failures: not for want of an engine, nor for an engine
// that cannot run, which a restart with another --llama-server may mend.
func (f *Fleet) keepPark(r *replica) {
	f.mu.Lock()
	st := f.models[r.model]
	if st == nil || !st.parked || !st.lasting {
		f.mu.Unlock()
		return
	}
	// For its entry: what more its backend ran it with (Runner) is not
	// what failed.
	entry, _, _ := strings.Cut(r.fingerprint, "+")
	pk := park{key: parkKey(entry, st.addedAt), reason: st.reason, failures: st.failedStarts, at: time.Now()}
	f.mu.Unlock()
	f.opts.Notify.Send(notify.Parked(r.model, pk.reason))
	// Not the replica's context: it ends as the model is parked.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.opts.Parks.keep(ctx, r.model, pk); err != nil {
		f.log.Warn("the park is not kept: a restart starts the model again", "model", r.model, "err", err)
	}
}

// unparkLocked forgets model's kept park, if it has one, once the
// reconciling lets go of the lock (flushUnparks); f.mu is held.
func (f *Fleet) unparkLocked(model string) {
	f.unpark = append(f.unpark, model)
}

// flushUnparks deletes the parks the reconciling let go of.
func (f *Fleet) flushUnparks() {
	f.mu.Lock()
	names := f.unpark
	f.unpark = nil
	f.mu.Unlock()
	if len(names) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.opts.Parks.forget(ctx, names...); err != nil {
		f.log.Warn("parks of models changed or removed are still kept", "models", names, "err", err)
	}
}

package catalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// MaxReplicas bounds a model's scaling: a typing slip of 1000 for 10 would
// otherwise ask the fleet for a thousand engines.
const MaxReplicas = 64

// SetScaling changes how many replicas of the model named name run: min
// always, up to max on demand. Nothing else of the entry changes, its
// added time included, so the fleet adds or stops replicas and leaves the
// running ones be. It fails with an error matching ErrNotFound for a model
// the catalog does not have, and with ErrInvalid for bounds it refuses.
func (s *Store) SetScaling(ctx context.Context, name string, min, max int) error {
	if min < 0 {
		return invalid("%s cannot keep %d replicas: keep 0 (loaded when first asked for) or more", name, min)
	}
	if max < min {
		return invalid("%s may scale to %d replicas, fewer than the %d it keeps: make its maximum at least its minimum", name, max, min)
	}
	if max > MaxReplicas {
		return invalid("%s may scale to at most %d replicas, not %d", name, MaxReplicas, max)
	}

	return s.edit(ctx, name, "scale", func(m *Model) { m.Scaling.Min, m.Scaling.Max = min, max })
}

// SetShare changes the share of its model's requests the canary named name
// takes. As SetScaling, nothing else of the entry changes, so its replicas
// run on.
func (s *Store) SetShare(ctx context.Context, name string, share float64) error {
	return s.edit(ctx, name, "share requests with", func(m *Model) {
		if m.Canary != nil {
			m.Canary.Share = share
		}
	})
}

// edit changes the entry named name by change, in one transaction, leaving
// what change does not touch as it is, its added time included; what says
// what it does, for an error ("scale").
func (s *Store) edit(ctx context.Context, name, what string, change func(*Model)) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, name, err)
	}
	defer tx.Rollback()

	row := tx.QueryRowContext(ctx, `SELECT name, class, role, added_by, added_at, spec FROM models WHERE name = ?`, name)
	m, err := scanModel(row)
	if errors.Is(err, sql.ErrNoRows) {
		return notFound(name)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, name, err)
	}
	change(&m)
	if err := m.Validate(); err != nil {
		return err
	}
	spec, err := json.Marshal(specOf(m))
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, name, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE models SET spec = ? WHERE name = ?`, string(spec), name); err != nil {
		return fmt.Errorf("%s %s: %w", what, name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%s %s: %w", what, name, err)
	}
	return nil
}

package updates

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"modelserve/internal/operr"
)

// store keeps updates and each model's last check in SQLite (tables
// updates and update_checks, migrations/0012_updates.sql).
type store struct{ db *sql.DB }

// ErrNotFound is an update the store does not have.
var ErrNotFound = errors.New("no such update")

// checkRow is a model's row of update_checks: its own interval, when set,
// and its last check of the commit it ran then (served).
type checkRow struct {
	interval *time.Duration
	policy   string
	// besideOnly is a model whose operator said its updates may not
	// replace its replica in place when there is no room beside it.
	besideOnly bool
	served     string
	last       *Check
}

// save records a check of model, which ran the commit served, and the
// update it found when it found one, in one transaction: the same move
// noticed again is the update already there, and new says whether this
// check added it.
func (s store) save(ctx context.Context, model, served string, c Check, found *Update) (u Update, added bool, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Update{}, false, fmt.Errorf("record the check of %s: %w", model, err)
	}
	defer tx.Rollback()

	if found != nil {
		files, err := json.Marshal(found.Files)
		if err != nil {
			return Update{}, false, fmt.Errorf("record the update of %s: %w", model, err)
		}
		res, err := tx.ExecContext(ctx,
			`INSERT INTO updates (model, repo, ref, old_commit, new_commit, files, noticed_at, state)
			 VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			 ON CONFLICT (model, old_commit, new_commit) DO NOTHING`,
			model, found.Repo, found.Ref, found.OldCommit, found.NewCommit, string(files),
			found.NoticedAt.UTC().Format(time.RFC3339Nano), StateAvailable)
		if err != nil {
			return Update{}, false, fmt.Errorf("record the update of %s: %w", model, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return Update{}, false, fmt.Errorf("record the update of %s: %w", model, err)
		}
		added = n == 1
		row := tx.QueryRowContext(ctx, `SELECT `+updateColumns+` FROM updates
			WHERE model = ? AND old_commit = ? AND new_commit = ?`, model, found.OldCommit, found.NewCommit)
		if u, err = scanUpdate(row); err != nil {
			return Update{}, false, fmt.Errorf("read the update of %s back: %w", model, err)
		}
		c.UpdateID = u.ID
	}
	var updateID sql.NullInt64
	if c.UpdateID != 0 {
		updateID = sql.NullInt64{Int64: c.UpdateID, Valid: true}
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO update_checks (model, served_commit, checked_at, head_commit, result, error, update_id)
		 VALUES (?, ?, ?, ?, ?, ?, ?)
		 ON CONFLICT (model) DO UPDATE SET served_commit = excluded.served_commit, checked_at = excluded.checked_at,
			head_commit = excluded.head_commit, result = excluded.result, error = excluded.error, update_id = excluded.update_id`,
		model, served, c.At.UTC().Format(time.RFC3339Nano), c.Commit, c.Result, c.Error, updateID); err != nil {
		return Update{}, false, fmt.Errorf("record the check of %s: %w", model, err)
	}
	if err := tx.Commit(); err != nil {
		return Update{}, false, fmt.Errorf("record the check of %s: %w", model, err)
	}
	return u, added, nil
}

// setSettings gives model its own interval between checks (nil: the
// server's default), what is done with its updates (PolicyManual or
// PolicyAuto), and whether they may run in place.
func (s store) setSettings(ctx context.Context, model string, d *time.Duration, policy string, inPlace bool) error {
	var secs sql.NullInt64
	if d != nil {
		secs = sql.NullInt64{Int64: int64(*d / time.Second), Valid: true}
	}
	if _, err := s.db.ExecContext(ctx,
		`INSERT INTO update_checks (model, interval_seconds, policy, in_place) VALUES (?, ?, ?, ?)
		 ON CONFLICT (model) DO UPDATE SET interval_seconds = excluded.interval_seconds, policy = excluded.policy,
			in_place = excluded.in_place`,
		model, secs, policy, inPlace); err != nil {
		return fmt.Errorf("set how %s is kept up to date: %w", model, err)
	}
	return nil
}

// policy is what is done with model's updates.
func (s store) policy(ctx context.Context, model string) (string, error) {
	p := PolicyManual
	err := s.db.QueryRowContext(ctx, `SELECT policy FROM update_checks WHERE model = ?`, model).Scan(&p)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("read how %s is kept up to date: %w", model, err)
	}
	return p, nil
}

// inPlace is whether model's updates may replace its replica in place
// when there is no room beside it: yes unless its operator said no.
func (s store) inPlace(ctx context.Context, model string) (bool, error) {
	ok := true
	err := s.db.QueryRowContext(ctx, `SELECT in_place FROM update_checks WHERE model = ?`, model).Scan(&ok)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("read whether %s may be updated in place: %w", model, err)
	}
	return ok, nil
}

// checks are every model's row of update_checks.
func (s store) checks(ctx context.Context) (map[string]checkRow, error) {
	rows, err := s.db.QueryContext(ctx,
		`SELECT model, interval_seconds, policy, in_place, served_commit, checked_at, head_commit, result, error, update_id FROM update_checks`)
	if err != nil {
		return nil, fmt.Errorf("read the update checks: %w", err)
	}
	defer rows.Close()
	out := map[string]checkRow{}
	for rows.Next() {
		var (
			model, policy, served, at, head, result, msg string
			secs, updateID                               sql.NullInt64
			inPlace                                      bool
		)
		if err := rows.Scan(&model, &secs, &policy, &inPlace, &served, &at, &head, &result, &msg, &updateID); err != nil {
			return nil, fmt.Errorf("read the update checks: %w", err)
		}
		r := checkRow{served: served, policy: policy, besideOnly: !inPlace}
		if secs.Valid {
			d := time.Duration(secs.Int64) * time.Second
			r.interval = &d
		}
		if at != "" {
			t, err := time.Parse(time.RFC3339Nano, at)
			if err != nil {
				return nil, fmt.Errorf("read the last check of %s: %w", model, err)
			}
			r.last = &Check{At: t, Result: result, Commit: head, Error: msg, UpdateID: updateID.Int64}
		}
		out[model] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the update checks: %w", err)
	}
	return out, nil
}

// available is the newest update of model from the commit from that is
// still available, nil when there is none.
func (s store) available(ctx context.Context, model, from string) (*Update, error) {
	row := s.db.QueryRowContext(ctx, `SELECT `+updateColumns+` FROM updates
		WHERE model = ? AND old_commit = ? AND state = ? ORDER BY id DESC LIMIT 1`, model, from, StateAvailable)
	u, err := scanUpdate(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the updates of %s: %w", model, err)
	}
	return &u, nil
}

// ListOptions choose a page of updates, newest first.
type ListOptions struct {
	// Model keeps the updates of one model; empty keeps all.
	Model string
	// Limit is the most to return (at most MaxList); Before keeps those
	// older than the update with that id.
	Limit  int
	Before int64
}

// MaxList bounds a page of updates.
const MaxList = 500

func (s store) list(ctx context.Context, o ListOptions) ([]Update, error) {
	if o.Limit <= 0 || o.Limit > MaxList {
		o.Limit = MaxList
	}
	q := `SELECT ` + updateColumns + ` FROM updates WHERE 1 = 1`
	var args []any
	if o.Model != "" {
		q += ` AND model = ?`
		args = append(args, o.Model)
	}
	if o.Before > 0 {
		q += ` AND id < ?`
		args = append(args, o.Before)
	}
	q += ` ORDER BY id DESC LIMIT ?`
	args = append(args, o.Limit)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list the updates: %w", err)
	}
	defer rows.Close()
	out := []Update{}
	for rows.Next() {
		u, err := scanUpdate(rows)
		if err != nil {
			return nil, fmt.Errorf("list the updates: %w", err)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the updates: %w", err)
	}
	return out, nil
}

func (s store) get(ctx context.Context, id int64) (Update, error) {
	u, err := scanUpdate(s.db.QueryRowContext(ctx, `SELECT `+updateColumns+` FROM updates WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Update{}, operr.Wrap(operr.NotFound, ErrNotFound, "there is no update %d: GET /api/v1/updates lists them", id)
	}
	if err != nil {
		return Update{}, fmt.Errorf("read update %d: %w", id, err)
	}
	return u, nil
}

const updateColumns = `id, model, repo, ref, old_commit, new_commit, files, noticed_at, state`

// scanUpdate reads a row of SELECT updateColumns FROM updates.
func scanUpdate(row interface{ Scan(...any) error }) (Update, error) {
	var u Update
	var files, at string
	if err := row.Scan(&u.ID, &u.Model, &u.Repo, &u.Ref, &u.OldCommit, &u.NewCommit, &files, &at, &u.State); err != nil {
		return Update{}, err
	}
	if err := json.Unmarshal([]byte(files), &u.Files); err != nil {
		return Update{}, fmt.Errorf("update %d's files: %w", u.ID, err)
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return Update{}, fmt.Errorf("update %d: %w", u.ID, err)
	}
	u.NoticedAt = t
	return u, nil
}

package fleet

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Start is one start of a replica's engine that became ready: the memory
// the replica was placed by (the check step's estimate) beside the memory
// its engine was measured to hold, so the estimate's error is known over
// time and not only while the replica runs.
type Start struct {
	Replica string `json:"replica"`
	Model   string `json:"model"`
	// File is the weights the engine loaded, as a path on its node.
	File string `json:"file"`
	// Context is the engine's whole context (--ctx-size) and Slots the
	// requests it serves at once: its profile's, the slots as the engine
	// itself reported them.
	Context       int       `json:"context"`
	Slots         int       `json:"slots"`
	EstimateBytes int64     `json:"estimate_bytes"`
	RSSBytes      int64     `json:"rss_bytes"`
	Started       time.Time `json:"started"`
	ReadyAt       time.Time `json:"ready_at"`
}

// History keeps the fleet's engine starts in SQLite (the table
// replica_starts). A nil *History keeps nothing.
type History struct{ db *sql.DB }

// NewHistory keeps starts in db, whose migrations have run.
func NewHistory(db *sql.DB) *History { return &History{db: db} }

// record saves s and returns its row, for the later measures of its run.
func (h *History) record(ctx context.Context, s Start) (int64, error) {
	if h == nil {
		return 0, nil
	}
	res, err := h.db.ExecContext(ctx, `INSERT INTO replica_starts
		(replica, model, file, context, slots, estimate_bytes, rss_bytes, started_at, ready_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		s.Replica, s.Model, s.File, s.Context, s.Slots, s.EstimateBytes, s.RSSBytes,
		s.Started.UTC().Format(time.RFC3339Nano), s.ReadyAt.UTC().Format(time.RFC3339Nano))
	if err != nil {
		return 0, fmt.Errorf("recording the start of replica %s: %w", s.Replica, err)
	}
	return res.LastInsertId()
}

// measured raises the run's resident size to rss if that is more: an
// engine grows its caches as it serves, and the largest size is what the
// estimate had to cover.
func (h *History) measured(ctx context.Context, row, rss int64) error {
	if h == nil || row == 0 {
		return nil
	}
	_, err := h.db.ExecContext(ctx, `UPDATE replica_starts SET rss_bytes = ? WHERE id = ? AND rss_bytes < ?`, rss, row, rss)
	return err
}

// Recent is the newest limit starts, newest first.
func (h *History) Recent(ctx context.Context, limit int) ([]Start, error) {
	if h == nil {
		return nil, nil
	}
	rows, err := h.db.QueryContext(ctx, `SELECT replica, model, file, context, slots, estimate_bytes, rss_bytes, started_at, ready_at
		FROM replica_starts ORDER BY id DESC LIMIT ?`, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Start
	for rows.Next() {
		var s Start
		var started, ready string
		if err := rows.Scan(&s.Replica, &s.Model, &s.File, &s.Context, &s.Slots, &s.EstimateBytes, &s.RSSBytes, &started, &ready); err != nil {
			return nil, err
		}
		s.Started, _ = time.Parse(time.RFC3339Nano, started)
		s.ReadyAt, _ = time.Parse(time.RFC3339Nano, ready)
		out = append(out, s)
	}
	return out, rows.Err()
}

package fleet

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"modelserve/catalog"
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
	// Size is the engine's whole context (--ctx-size) and the requests
	// it serves at once: its profile's, the slots as the engine itself
	// reported them. Its JSON and columns are "context" (the pool) and
	// "slots" (startWire).
	Size          catalog.Size `json:"-"`
	EstimateBytes int64        `json:"estimate_bytes"`
	RSSBytes      int64        `json:"rss_bytes"`
	Started       time.Time    `json:"started"`
	ReadyAt       time.Time    `json:"ready_at"`
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
		s.Replica, s.Model, s.File, s.Size.Pool, s.Size.Slots, s.EstimateBytes, s.RSSBytes,
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
		if err := rows.Scan(&s.Replica, &s.Model, &s.File, &s.Size.Pool, &s.Size.Slots, &s.EstimateBytes, &s.RSSBytes, &started, &ready); err != nil {
			return nil, err
		}
		s.Started, _ = time.Parse(time.RFC3339Nano, started)
		s.ReadyAt, _ = time.Parse(time.RFC3339Nano, ready)
		out = append(out, s)
	}
	return out, rows.Err()
}

// startWire is a Start as its JSON has always said it: the pool as
// context, beside its slots.
type startWire struct {
	Replica string `json:"replica"`
	Model   string `json:"model"`
	File    string `json:"file"`
	Context int    `json:"context"`
	Slots   int    `json:"slots"`
	startFields
}

// startFields is Start without its methods, so that startWire encodes its
// other fields the ordinary way.
type startFields Start

// MarshalJSON writes the start with its size as context and slots.
func (s Start) MarshalJSON() ([]byte, error) {
	return json.Marshal(startWire{Replica: s.Replica, Model: s.Model, File: s.File, Context: s.Size.Pool, Slots: s.Size.Slots, startFields: startFields(s)})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (s *Start) UnmarshalJSON(b []byte) error {
	var w startWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*s = Start(w.startFields)
	s.Replica, s.Model, s.File, s.Size = w.Replica, w.Model, w.File, catalog.Size{Pool: w.Context, Slots: w.Slots}
	return nil
}

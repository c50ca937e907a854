package catalog

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"modelserve/internal/operr"
	"modelserve/internal/words"
)

// MaxReplicas bounds a model's scaling: a typing slip of 1000 for 10 would
// otherwise ask the fleet for a thousand engines.
const MaxReplicas = 64

// DefaultIdleAfter is how long replicas started on demand wait for the
// next request when the entry does not say (Scaling.IdleAfter zero): long
// enough that someone reading an answer and asking again finds the model
// loaded, short enough that a model tried once gives its memory back
// within the hour. Both fleets read it (as fleet.DefaultIdleAfter).
const DefaultIdleAfter = 15 * time.Minute

// Bounds of an idle time an operator sets: below a second a replica could
// stop between two requests of one conversation; above a week it is a
// pinned model by another name (keep it with scaling.min instead).
const (
	MinIdleAfter = time.Second
	MaxIdleAfter = 168 * time.Hour
)

// ParseIdleAfter reads how long replicas started on demand keep running
// with no request, as an operator writes it ("30s", "15m"; "0" for the
// default), for the serve request, the scale API and the console alike.
func ParseIdleAfter(text string) (time.Duration, error) {
	text = strings.TrimSpace(text)
	if text == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(text)
	if err != nil || d < MinIdleAfter || d > MaxIdleAfter {
		return 0, invalid("idle_after is a duration from 1s to 168h (a week), such as 30s or 15m, or 0 for the default of %s, not %s", words.Span(DefaultIdleAfter), operr.Quote(text))
	}
	return d, nil
}

// MarshalJSON writes IdleAfter as a duration people read and
// ParseIdleAfter takes ("30s", "15m0s"), in the API and the stored entry
// alike; zero (the default) is left out.
func (s Scaling) MarshalJSON() ([]byte, error) {
	type out struct {
		Min       int    `json:"min"`
		Max       int    `json:"max"`
		IdleAfter string `json:"idle_after,omitempty"`
	}
	o := out{Min: s.Min, Max: s.Max}
	if s.IdleAfter != 0 {
		o.IdleAfter = s.IdleAfter.String()
	}
	return json.Marshal(o)
}

// UnmarshalJSON reads IdleAfter as a duration string, or as the number of
// nanoseconds entries stored before it was written so still hold.
func (s *Scaling) UnmarshalJSON(b []byte) error {
	var in struct {
		Min       int             `json:"min"`
		Max       int             `json:"max"`
		IdleAfter json.RawMessage `json:"idle_after"`
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*s = Scaling{Min: in.Min, Max: in.Max}
	switch raw := bytes.TrimSpace(in.IdleAfter); {
	case len(raw) == 0, string(raw) == "null":
	case raw[0] == '"':
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return err
		}
		d, err := time.ParseDuration(text)
		if err != nil {
			return fmt.Errorf("scaling.idle_after: %w", err)
		}
		s.IdleAfter = d
	default:
		var ns int64
		if err := json.Unmarshal(raw, &ns); err != nil {
			return fmt.Errorf("scaling.idle_after is a duration such as \"30s\", not %s", raw)
		}
		s.IdleAfter = time.Duration(ns)
	}
	return nil
}

// SetScaling changes how many replicas of the model named name run: min
// always, up to max on demand; and, when idleAfter is given, how long
// those above min keep running with no request (0: DefaultIdleAfter), in
// the same edit. Nothing else of the entry changes, its added time
// included, so the fleet adds or stops replicas and leaves the running
// ones be. It fails with an error matching ErrNotFound for a model the
// catalog does not have, and with ErrInvalid for bounds it refuses.
func (s *Store) SetScaling(ctx context.Context, name string, min, max int, idleAfter *time.Duration) error {
	if min < 0 {
		return invalid("%s cannot keep %d replicas: keep 0 (loaded when first asked for) or more", name, min)
	}
	if max < min {
		return invalid("%s may scale to %d replicas, fewer than the %d it keeps: make its maximum at least its minimum", name, max, min)
	}
	if max > MaxReplicas {
		return invalid("%s may scale to at most %d replicas, not %d", name, MaxReplicas, max)
	}

	if d := idleAfter; d != nil && *d != 0 && (*d < MinIdleAfter || *d > MaxIdleAfter) {
		return invalid("%s may wait from 1s to 168h (a week) for its next request before its replicas on demand stop, or 0 for the default of %s, not %s", name, words.Span(DefaultIdleAfter), words.Span(*d))
	}

	return s.edit(ctx, name, "scale", func(m *Model) {
		m.Scaling.Min, m.Scaling.Max = min, max
		if idleAfter != nil {
			m.Scaling.IdleAfter = *idleAfter
		}
	})
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

package catalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"modelserve/internal/hf"
)

// Version is one set of weights a model has run or tried, by commit. The
// store writes versions as a side effect of Add: the entry of a model is
// its current version, and a canary entry its canary; so what the catalog
// serves and what its history says cannot disagree.
type Version struct {
	ID      int64        `json:"id"`
	Model   string       `json:"model"`
	Commit  string       `json:"commit"`
	Ref     string       `json:"ref,omitempty"`
	Files   []OriginFile `json:"files"`
	Profile Profile      `json:"profile"`
	State   string       `json:"state"`
	// Reason is why a version ended: rolled back because..., retired when
	// which commit took its place.
	Reason  string    `json:"reason,omitempty"`
	Created time.Time `json:"created"`
	Ended   time.Time `json:"ended,omitzero"`
}

// The states of a version.
const (
	VersionCurrent    = "current"
	VersionCanary     = "canary"
	VersionRetired    = "retired"
	VersionRolledBack = "rolled_back"
)

// recordVersion writes m's version in tx: a model's entry is its current
// version (the one before, if another commit, is retired), a canary's its
// model's canary. An entry with no origin has no version to say.
func recordVersion(ctx context.Context, tx *sql.Tx, m Model, now time.Time) error {
	if m.Origin == nil || m.Origin.Revision == "" {
		return nil
	}
	model, state := m.Name, VersionCurrent
	if m.Canary != nil {
		model, state = m.Canary.Of, VersionCanary
	}
	files, err := json.Marshal(m.Origin.Files)
	if err != nil {
		return err
	}
	var prof []byte
	if len(m.Profiles) > 0 {
		if prof, err = json.Marshal(m.Profiles[0]); err != nil {
			return err
		}
	}
	at := now.UTC().Format(time.RFC3339Nano)
	if state == VersionCurrent {
		if _, err := tx.ExecContext(ctx, `UPDATE model_versions SET state = ?, reason = ?, ended_at = ?
			WHERE model = ? AND state = ? AND commit_sha <> ?`,
			VersionRetired, "replaced by "+hf.Short(m.Origin.Revision), at, model, VersionCurrent, m.Origin.Revision); err != nil {
			return fmt.Errorf("retire the versions of %s before %s: %w", model, hf.Short(m.Origin.Revision), err)
		}
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO model_versions (model, commit_sha, ref, files, profile, state, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (model, commit_sha) DO UPDATE SET ref = excluded.ref, files = excluded.files,
			profile = excluded.profile, state = excluded.state, reason = '', ended_at = ''`,
		model, m.Origin.Revision, m.Origin.Ref, string(files), string(prof), state, at); err != nil {
		return fmt.Errorf("record the version %s of %s: %w", hf.Short(m.Origin.Revision), model, err)
	}
	return nil
}

// EndVersion marks model's version at commit as ended in state (retired or
// rolled back), saying why.
func (s *Store) EndVersion(ctx context.Context, model, commit, state, reason string) error {
	_, err := s.db.ExecContext(ctx, `UPDATE model_versions SET state = ?, reason = ?, ended_at = ? WHERE model = ? AND commit_sha = ?`,
		state, reason, time.Now().UTC().Format(time.RFC3339Nano), model, commit)
	if err != nil {
		return fmt.Errorf("end the version %s of %s: %w", hf.Short(commit), model, err)
	}
	return nil
}

// Versions are model's versions, newest first.
func (s *Store) Versions(ctx context.Context, model string) ([]Version, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, model, commit_sha, ref, files, profile, state, reason, created_at, ended_at
		FROM model_versions WHERE model = ? ORDER BY id DESC LIMIT 200`, model)
	if err != nil {
		return nil, fmt.Errorf("read the versions of %s: %w", model, err)
	}
	defer rows.Close()
	out := []Version{}
	for rows.Next() {
		var v Version
		var files, prof, created, ended string
		if err := rows.Scan(&v.ID, &v.Model, &v.Commit, &v.Ref, &files, &prof, &v.State, &v.Reason, &created, &ended); err != nil {
			return nil, fmt.Errorf("read the versions of %s: %w", model, err)
		}
		_ = json.Unmarshal([]byte(files), &v.Files)
		_ = json.Unmarshal([]byte(prof), &v.Profile)
		v.Created, _ = time.Parse(time.RFC3339Nano, created)
		v.Ended, _ = time.Parse(time.RFC3339Nano, ended)
		out = append(out, v)
	}
	return out, rows.Err()
}

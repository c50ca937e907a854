package catalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"modelserve/internal/operr"
	"modelserve/internal/store"
	"time"
)

// Store keeps the catalog in SQLite (tables models and aliases, created by
// internal/store's migrations).
//
// Every method is one transaction. Reads are too: a model and its aliases
// live in two tables, and reading both inside one transaction means a
// concurrent Add never shows a model with another version's aliases.
type Store struct {
	db *sql.DB
}

// NewStore returns the catalog kept in db, opened by store.Open.
func NewStore(db *sql.DB) *Store { return &Store{db: db} }

// Add puts m in the catalog as added by by, now, replacing any model of the
// same name along with its aliases. Nothing is written when it is refused.
func (s *Store) Add(ctx context.Context, m Model, by string) error {
	return s.add(ctx, m, by, true)
}

// AddNew is Add for a name not yet in the catalog: one that is fails with
// ErrExists, and the catalog is left as it was.
func (s *Store) AddNew(ctx context.Context, m Model, by string) error {
	return s.add(ctx, m, by, false)
}

func (s *Store) add(ctx context.Context, m Model, by string, replace bool) error {
	if err := m.Validate(); err != nil {
		return err
	}
	m.AddedBy, m.AddedAt = by, time.Now().UTC()

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("add %s to the catalog: %w", m.Name, err)
	}
	defer tx.Rollback()

	var exists bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM models WHERE name = ?)`, m.Name).Scan(&exists); err != nil {
		return fmt.Errorf("add %s to the catalog: %w", m.Name, err)
	}
	if exists && !replace {
		return operr.Wrap(operr.Conflict, ErrExists, "%s is already in the catalog: pick another name, or remove it first", m.Name)
	}

	// Delete and insert rather than update: the cascade takes the old
	// aliases, and the new ones go in as listed. The database refuses a
	// name or alias another model answers to (primary keys and triggers);
	// the rollback then undoes what was written, and the refusal says who
	// holds it.
	if _, err := tx.ExecContext(ctx, `DELETE FROM models WHERE name = ?`, m.Name); err != nil {
		return fmt.Errorf("add %s to the catalog: %w", m.Name, err)
	}
	spec, err := json.Marshal(specOf(m))
	if err != nil {
		return fmt.Errorf("add %s to the catalog: %w", m.Name, err)
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO models (name, class, role, added_by, added_at, spec) VALUES (?, ?, ?, ?, ?, ?)`,
		m.Name, m.Class, m.Role, m.AddedBy, m.AddedAt.Format(time.RFC3339Nano), string(spec)); err != nil {
		if holder, _, ok := heldBy(ctx, tx, m.Name, m.Name); ok {
			return invalid("the name %s is already an alias of %s: pick another name, or remove the alias from %s first", m.Name, holder, holder)
		}
		return fmt.Errorf("add %s to the catalog: %w", m.Name, err)
	}
	if err := recordVersion(ctx, tx, m, m.AddedAt); err != nil {
		return err
	}
	for i, a := range m.Aliases {
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO aliases (alias, model, position) VALUES (?, ?, ?)`, a, m.Name, i); err != nil {
			holder, isName, ok := heldBy(ctx, tx, a, m.Name)
			switch {
			case ok && isName:
				return invalid("the alias %s of %s is the name of another model: pick another alias", a, m.Name)
			case ok:
				return invalid("the alias %s of %s is already an alias of %s: pick another, or remove it from %s first", a, m.Name, holder, holder)
			}
			return fmt.Errorf("add alias %s of %s to the catalog: %w", a, m.Name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("add %s to the catalog: %w", m.Name, err)
	}
	return nil
}

// heldBy is the model other than self that already answers to name, and
// whether name is that model's own name (else it is one of its aliases).
// It explains a refused insert, so a failure to look is reported as the
// insert's own error.
func heldBy(ctx context.Context, tx *sql.Tx, name, self string) (holder string, isName, ok bool) {
	err := tx.QueryRowContext(ctx,
		`SELECT name, 1 FROM models WHERE name = ? AND name <> ?
		 UNION ALL
		 SELECT model, 0 FROM aliases WHERE alias = ? AND model <> ?
		 LIMIT 1`, name, self, name, self).Scan(&holder, &isName)
	return holder, isName, err == nil
}

// specOf is what goes in the spec column: the model without what has a
// column or table of its own, so the two can never disagree.
func specOf(m Model) Model {
	m.Name, m.Aliases, m.Class, m.Role, m.AddedBy, m.AddedAt = "", nil, "", "", "", time.Time{}
	return m
}

// Get returns the model named name, or an error matching ErrNotFound.
// Aliases are not looked up: name is the model's own name.
func (s *Store) Get(ctx context.Context, name string) (Model, error) {
	// Read-only: one snapshot of the model and its aliases, which does
	// not queue behind the writers for the write lock (store's gate).
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return Model{}, fmt.Errorf("read %s from the catalog: %w", name, err)
	}
	defer tx.Rollback()

	row := tx.QueryRowContext(ctx,
		`SELECT name, class, role, added_by, added_at, spec FROM models WHERE name = ?`, name)
	m, err := scanModel(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Model{}, notFound(name)
	}
	if err != nil {
		return Model{}, fmt.Errorf("read %s from the catalog: %w", name, err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT alias FROM aliases WHERE model = ? ORDER BY position`, name)
	if err != nil {
		return Model{}, fmt.Errorf("read the aliases of %s: %w", name, err)
	}
	defer rows.Close()
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			return Model{}, fmt.Errorf("read the aliases of %s: %w", name, err)
		}
		m.Aliases = append(m.Aliases, a)
	}
	if err := rows.Err(); err != nil {
		return Model{}, fmt.Errorf("read the aliases of %s: %w", name, err)
	}
	if err := tx.Commit(); err != nil {
		return Model{}, fmt.Errorf("read %s from the catalog: %w", name, err)
	}
	return m, nil
}

// List returns every model, sorted by name.
func (s *Store) List(ctx context.Context) ([]Model, error) {
	// Read-only, as Get: under many jobs, a list that queued for the
	// write lock waited seconds behind their writes.
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("list the catalog: %w", err)
	}
	defer tx.Rollback()

	aliases, err := allAliases(ctx, tx)
	if err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, `SELECT name, class, role, added_by, added_at, spec FROM models ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list the catalog: %w", err)
	}
	defer rows.Close()
	var out []Model
	for rows.Next() {
		m, err := scanModel(rows)
		if err != nil {
			return nil, fmt.Errorf("list the catalog: %w", err)
		}
		m.Aliases = aliases[m.Name]
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the catalog: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("list the catalog: %w", err)
	}
	return out, nil
}

// allAliases is every model's aliases, in the order they were listed.
func allAliases(ctx context.Context, tx *sql.Tx) (map[string][]string, error) {
	return readAliases(ctx, tx, `SELECT model, alias FROM aliases ORDER BY model, position`)
}

// readAliases reads query's rows of (model, alias) as each model's
// aliases, in the order they come.
func readAliases(ctx context.Context, tx *sql.Tx, query string, args ...any) (map[string][]string, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list the catalog's aliases: %w", err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var model, alias string
		if err := rows.Scan(&model, &alias); err != nil {
			return nil, fmt.Errorf("list the catalog's aliases: %w", err)
		}
		out[model] = append(out[model], alias)
	}
	return out, rows.Err()
}

// scanModel reads a row of SELECT name, class, role, added_by, added_at,
// spec FROM models.
func scanModel(row interface{ Scan(...any) error }) (Model, error) {
	var name, class, role, by, at, spec string
	if err := row.Scan(&name, &class, &role, &by, &at, &spec); err != nil {
		return Model{}, err
	}
	var m Model
	if err := json.Unmarshal([]byte(spec), &m); err != nil {
		return Model{}, fmt.Errorf("model %s: %w", name, err)
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return Model{}, fmt.Errorf("model %s: %w", name, err)
	}
	m.Name, m.Class, m.Role, m.AddedBy, m.AddedAt = name, class, role, by, t
	return m, nil
}

// Remove takes the model named name, and its aliases, out of the catalog;
// one it does not have is an error matching ErrNotFound.
func (s *Store) Remove(ctx context.Context, name string) error {
	err := s.remove(ctx, name)
	// The disk's fault, not the program's: said, for the API and the
	// console alike.
	return store.FullError(err, fmt.Sprintf("%s could not be removed from the catalog", operr.Quote(name)))
}

func (s *Store) remove(ctx context.Context, name string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("remove %s from the catalog: %w", name, err)
	}
	defer tx.Rollback()

	res, err := tx.ExecContext(ctx, `DELETE FROM models WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("remove %s from the catalog: %w", name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("remove %s from the catalog: %w", name, err)
	}
	if n == 0 {
		return notFound(name)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("remove %s from the catalog: %w", name, err)
	}
	return nil
}

func notFound(name string) error {
	return operr.Wrap(operr.NotFound, ErrNotFound, "the catalog has no model named %s: GET /api/v1/catalog lists the models it has", operr.Quote(name))
}

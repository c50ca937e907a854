package catalog

import (
	"context"
	"database/sql"
	"fmt"

	"modelserve/internal/operr"
)

// DefaultPage is a page of the catalog's length when none is asked. The
// API and the console page the catalog by name, a model's name the
// cursor: it costs the same at any depth and does not shift as models are
// added or removed between pages, where an offset would skip or repeat one.
const DefaultPage = 100

// PageQuery asks for a window of the catalog, by name.
type PageQuery struct {
	// After is the name the window begins after; "" for the first.
	After string
	// Limit is the most models the window holds (at least 1).
	Limit int
	// Holding, with no After, is a model the window should show
	// wherever it stands in the catalog (the one just checked, whose
	// page says how its check went): the window then begins at it when
	// it is not among the first Limit.
	Holding string
}

// Page is a window of the catalog, sorted by name.
type Page struct {
	Models []Model
	// After is the name the window begins after ("" for the first
	// window): the query's, or the model before Holding.
	After string
	// Before is how many models come before the window, Total how many
	// the catalog holds, and More whether any follow the window.
	Before, Total int
	More          bool
}

// Page reads one window of the catalog: its models and their aliases
// alone, and counts of the rest, in one read-only transaction (a
// snapshot, which waits for no writer). A page costs its own rows, not
// the catalog's: at 500 models, reading all of them to show 25 was most
// of the catalog page's and the API's time.
func (s *Store) Page(ctx context.Context, q PageQuery) (Page, error) {
	limit := max(q.Limit, 1)
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return Page{}, fmt.Errorf("page the catalog: %w", err)
	}
	defer tx.Rollback()

	var p Page
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM models`).Scan(&p.Total); err != nil {
		return Page{}, fmt.Errorf("page the catalog: %w", err)
	}
	p.After = q.After
	if q.After == "" && q.Holding != "" {
		// The model before Holding, when Holding is beyond the first
		// window: the window then begins at Holding.
		var before int
		var prev sql.NullString
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*), MAX(name) FROM models WHERE name < ?`, q.Holding).Scan(&before, &prev); err != nil {
			return Page{}, fmt.Errorf("page the catalog: %w", err)
		}
		var held bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM models WHERE name = ?)`, q.Holding).Scan(&held); err != nil {
			return Page{}, fmt.Errorf("page the catalog: %w", err)
		}
		if held && before >= limit {
			p.After = prev.String
		}
	}
	if p.After != "" {
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM models WHERE name <= ?`, p.After).Scan(&p.Before); err != nil {
			return Page{}, fmt.Errorf("page the catalog: %w", err)
		}
	}

	// One more than the window, to know whether any follow it.
	rows, err := tx.QueryContext(ctx, `SELECT name, class, role, added_by, added_at, spec FROM models
		WHERE name > ? ORDER BY name LIMIT ?`, p.After, limit+1)
	if err != nil {
		return Page{}, fmt.Errorf("page the catalog: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		if len(p.Models) == limit {
			p.More = true
			break
		}
		m, err := scanModel(rows)
		if err != nil {
			return Page{}, fmt.Errorf("page the catalog: %w", err)
		}
		p.Models = append(p.Models, m)
	}
	if err := rows.Err(); err != nil {
		return Page{}, fmt.Errorf("page the catalog: %w", err)
	}
	rows.Close()
	if len(p.Models) > 0 {
		aliases, err := aliasesBetween(ctx, tx, p.After, p.Models[len(p.Models)-1].Name)
		if err != nil {
			return Page{}, err
		}
		for i := range p.Models {
			p.Models[i].Aliases = aliases[p.Models[i].Name]
		}
	}
	if err := tx.Commit(); err != nil {
		return Page{}, fmt.Errorf("page the catalog: %w", err)
	}
	return p, nil
}

// aliasesBetween is the aliases of the models named after after up to
// last, in the order they were listed.
func aliasesBetween(ctx context.Context, tx *sql.Tx, after, last string) (map[string][]string, error) {
	return readAliases(ctx, tx, `SELECT model, alias FROM aliases WHERE model > ? AND model <= ? ORDER BY model, position`, after, last)
}

// CheckAfter refuses a cursor no model's name could be; a name the
// catalog does not have (a model removed since) pages as well as one it
// has.
func CheckAfter(after string) error {
	if !nameOK(after) {
		return operr.New(operr.Invalid, "after is a model's name, where the page before ended (%s), not %s", nameRule, operr.Quote(after))
	}
	return nil
}

// Package store opens modelserve's SQLite database and brings its schema up
// to date.
//
// Everything modelserve must not forget across a restart — the catalog, the
// jobs and their steps, users and API tokens — lives in one SQLite file in the
// data directory. Opening it the same way everywhere, with the same pragmas,
// and applying the numbered migrations exactly once, is what this package is
// for; the packages that own the tables write their own SQL.
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

//go:embed migrations/*.sql
var migrations embed.FS

// maxIdleConns is how many connections are kept open between reads.
const maxIdleConns = 16

// Open opens (creating if need be) the database at file and applies every
// migration it has not had yet. A database that a newer modelserve has
// migrated further than this one knows is refused rather than misread.
func Open(ctx context.Context, file string) (*sql.DB, error) {
	q := url.Values{}
	// WAL lets the console read while a job writes; without it every
	// reader waits for each progress update to commit.
	q.Set("_journal_mode", "WAL")
	// SQLite leaves foreign keys off unless asked, per connection; steps
	// must not outlive their job.
	q.Set("_foreign_keys", "on")
	// Several goroutines write (jobs, the fleet, sign-ins); they queue
	// for the write lock in Go (gate.go). Another process writing waits
	// up to five seconds for it rather than fail with SQLITE_BUSY.
	q.Set("_busy_timeout", "5000")
	// Transactions take the write lock at BEGIN, so two writers never
	// deadlock upgrading read locks (which busy_timeout cannot resolve).
	q.Set("_txlock", "immediate")
	if err := private(file); err != nil {
		return nil, err
	}
	// Its writers queue for the write lock in Go (gate.go).
	db := sql.OpenDB(&connector{dsn: "file:" + file + "?" + q.Encode(), gate: newGate()})
	// Readers run side by side, and beside the writer (WAL). database/sql
	// keeps two idle connections unless told, so under many readers (the
	// console's watchers, the API's, a hundred jobs) each opened one of
	// its own and closed it after: a file open, the schema parsed and a
	// cold page cache every time, a twentieth of modelserve's CPU while
	// the engines beside it starved. Kept, they are closed after a while
	// idle.
	db.SetMaxIdleConns(maxIdleConns)
	db.SetConnMaxIdleTime(time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", file, err)
	}
	// The first connection has made the -wal and -shm files by now.
	if err := private(file); err != nil {
		db.Close()
		return nil, err
	}
	if err := migrate(ctx, db, migrations); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// private makes the database file, and its -wal and -shm files where they
// are, readable and writable by modelserve's user alone. The database holds
// password hashes, who is signed in and the jobs' history; nobody else on
// the machine has any business reading it. The file is made 0600 before
// SQLite first opens it, as SQLite gives its -wal and -shm files the mode
// of the database file; a database from an older modelserve, made 0644, is
// tightened.
func private(file string) error {
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open %s: %w", file, err)
	}
	f.Close()
	for _, name := range []string{file, file + "-wal", file + "-shm"} {
		info, err := os.Stat(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read the mode of %s: %w", name, err)
		}
		if info.Mode().Perm()&0o077 == 0 {
			continue
		}
		if err := os.Chmod(name, info.Mode().Perm()&0o600); err != nil {
			return fmt.Errorf("make %s private (%w): chmod 600 it, or run modelserve as its owner", name, err)
		}
	}
	return nil
}

// migration is one numbered file of migrations/.
type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, n := range names {
		base := path.Base(n)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s is not named NNNN_what.sql", base)
		}
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: base, sql: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i := 1; i < len(out); i++ {
		if out[i].version == out[i-1].version {
			return nil, fmt.Errorf("migrations %s and %s share a number", out[i-1].name, out[i].name)
		}
	}
	return out, nil
}

// ErrNewerSchema is a database migrated by a newer modelserve than this one.
var ErrNewerSchema = errors.New("the database was written by a newer modelserve")

func migrate(ctx context.Context, db *sql.DB, fsys fs.FS) error {
	ms, err := loadMigrations(fsys)
	if err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY,
		name TEXT NOT NULL,
		applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now'))
	)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	var have int
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	known := 0
	if len(ms) > 0 {
		known = ms[len(ms)-1].version
	}
	if have > known {
		return fmt.Errorf("%w (schema version %d; this one knows up to %d): run the newer modelserve, or restore a backup of the data directory",
			ErrNewerSchema, have, known)
	}
	for _, m := range ms {
		if m.version <= have {
			continue
		}
		if err := apply(ctx, db, m); err != nil {
			return err
		}
	}
	return nil
}

// apply runs one migration and records it in the same transaction, so a
// migration that fails halfway leaves neither its changes nor its record.
func apply(ctx context.Context, db *sql.DB, m migration) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return fmt.Errorf("migration %s: %w", m.name, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name) VALUES (?, ?)`, m.version, m.name); err != nil {
		return fmt.Errorf("record migration %s: %w", m.name, err)
	}
	return tx.Commit()
}

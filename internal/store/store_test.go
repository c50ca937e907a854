package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

func mustOpen(t *testing.T, file string) {
	t.Helper()
	db, err := Open(context.Background(), file)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestMigrationsAppliedOnceAcrossOpens(t *testing.T) {
	file := filepath.Join(t.TempDir(), "modelserve.db")
	mustOpen(t, file)
	mustOpen(t, file)

	db, err := Open(context.Background(), file)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ms, err := loadMigrations(migrations)
	if err != nil {
		t.Fatal(err)
	}
	var n, distinct int
	if err := db.QueryRow(`SELECT COUNT(*), COUNT(DISTINCT version) FROM schema_migrations`).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != len(ms) || distinct != len(ms) {
		t.Fatalf("schema_migrations has %d rows (%d versions) after three opens, want %d", n, distinct, len(ms))
	}
}

func TestPragmasOnEveryConnection(t *testing.T) {
	db, err := Open(context.Background(), filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Several connections at once, so a pragma set on only the first
	// would show on another.
	db.SetMaxOpenConns(3)
	ctx := context.Background()
	var conns []interface{ Close() error }
	for i := 0; i < 3; i++ {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var mode string
		var fk, busy int
		if err := c.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, `PRAGMA foreign_keys`).Scan(&fk); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy); err != nil {
			t.Fatal(err)
		}
		if mode != "wal" || fk != 1 || busy != 5000 {
			t.Errorf("connection %d: journal_mode=%s foreign_keys=%d busy_timeout=%d", i, mode, fk, busy)
		}
	}
	for _, c := range conns {
		c.Close()
	}
}

func TestNewerDatabaseRefused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "m.db")
	db, err := Open(context.Background(), file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO schema_migrations (version, name) VALUES (9999, '9999_future.sql')`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	_, err = Open(context.Background(), file)
	if !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("open of a newer database: %v, want ErrNewerSchema", err)
	}
	if !strings.Contains(err.Error(), "9999") {
		t.Errorf("the refusal does not say which version it found: %v", err)
	}
}

func TestFailedMigrationLeavesNothing(t *testing.T) {
	file := filepath.Join(t.TempDir(), "m.db")
	db, err := Open(context.Background(), file)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ms, _ := loadMigrations(migrations)
	next := ms[len(ms)-1].version + 1
	bad := fstest.MapFS{}
	for _, m := range ms {
		bad["migrations/"+m.name] = &fstest.MapFile{Data: []byte(m.sql)}
	}
	// Creates a table, then fails: the table must not survive.
	bad[fmtName(next, "broken")] = &fstest.MapFile{Data: []byte(`CREATE TABLE half (x); INSERT INTO nowhere VALUES (1);`)}

	err = migrate(context.Background(), db, bad)
	if err == nil || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("migrate with a broken migration: %v, want an error naming it", err)
	}
	var n int
	db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE name = 'half'`).Scan(&n)
	if n != 0 {
		t.Error("the broken migration's table was left behind")
	}
	db.QueryRow(`SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, next).Scan(&n)
	if n != 0 {
		t.Error("the broken migration was recorded as applied")
	}
}

func fmtName(v int, what string) string {
	return fmt.Sprintf("migrations/%04d_%s.sql", v, what)
}

// TestReadersKeepTheirConnections: connections that readers used side by
// side are kept for the next readers rather than closed and opened again.
func TestReadersKeepTheirConnections(t *testing.T) {
	db, err := Open(context.Background(), filepath.Join(t.TempDir(), "modelserve.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const readers = 8
	read := func() {
		t.Helper()
		txs := make([]*sql.Tx, readers) // each holds its connection until all have one
		for i := range txs {
			tx, err := db.BeginTx(context.Background(), &sql.TxOptions{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			var n int
			if err := tx.QueryRow(`SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			txs[i] = tx
		}
		for _, tx := range txs {
			tx.Rollback()
		}
	}
	read()
	opened := db.Stats().OpenConnections
	read()
	if st := db.Stats(); st.MaxIdleClosed > 0 || st.OpenConnections != opened || st.Idle < readers {
		t.Errorf("after %d readers side by side twice: %d connections open (%d before), %d idle, %d closed as too many idle; want the readers' connections kept",
			readers, st.OpenConnections, opened, st.Idle, st.MaxIdleClosed)
	}
}

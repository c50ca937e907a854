package store

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
)

// openAt opens file migrated up to version alone: a database as an older
// modelserve left it.
func openAt(ctx context.Context, file string, version int) (*sql.DB, error) {
	ms, err := loadMigrations(migrations)
	if err != nil {
		return nil, err
	}
	older := fstest.MapFS{}
	for _, m := range ms {
		if m.version <= version {
			older["migrations/"+m.name] = &fstest.MapFile{Data: []byte(m.sql)}
		}
	}
	db, err := sql.Open("sqlite3", "file:"+file+"?_foreign_keys=on")
	if err != nil {
		return nil, err
	}
	if err := migrate(ctx, db, older); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func TestDatabaseFilesArePrivate(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before makes what an older modelserve left, if anything.
		before func(file string)
	}{
		{"a new database", func(string) {}},
		{"an older database open to all", func(file string) {
			mustOpen(t, file)
			for _, f := range []string{file, file + "-wal", file + "-shm"} {
				os.Chmod(f, 0o644)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "modelserve.db")
			tc.before(file)
			db, err := Open(context.Background(), file)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			// A write, so the -wal file is there and in use.
			if _, err := db.Exec(`INSERT INTO meta (key, value) VALUES ('probe', x'00')`); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{file, file + "-wal", file + "-shm"} {
				info, err := os.Stat(f)
				if err != nil {
					t.Fatal(err)
				}
				if info.Mode().Perm() != 0o600 {
					t.Errorf("%s is %v, want 0600", filepath.Base(f), info.Mode().Perm())
				}
			}
		})
	}
}

func TestSessionKeysLeaveTheDatabase(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "modelserve.db")
	// A database as modelserve left it before migration 0008: the cookie
	// keys in the meta table.
	db, err := openAt(ctx, file, 7)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO meta (key, value) VALUES ('session_keys', randomblob(96))`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	db, err = Open(ctx, file)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM meta WHERE key = 'session_keys'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the session keys are still in the database after migrating (%d rows, %v)", n, err)
	}
	if _, err := db.Exec(`SELECT id, secret_hash, user, expires_at FROM sessions`); err != nil {
		t.Fatalf("no sessions table: %v", err)
	}
}

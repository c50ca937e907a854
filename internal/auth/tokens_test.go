package auth

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"modelserve/internal/store"
)

func mustDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestTokenLifecycle(t *testing.T) {
	ctx := context.Background()
	db := mustDB(t)
	toks := NewTokens(db)

	tok, err := toks.Create(ctx, "ci-bot")
	if err != nil {
		t.Fatal(err)
	}
	if name, err := toks.Check(ctx, tok); err != nil || name != "ci-bot" {
		t.Fatalf("check of a new token: %q, %v", name, err)
	}

	// Only a hash is kept: the token itself appears nowhere in the table.
	var stored string
	db.QueryRow(`SELECT name || hash || created_at FROM api_tokens`).Scan(&stored)
	if strings.Contains(stored, strings.TrimPrefix(tok, tokenPrefix)) {
		t.Error("the token is stored as given")
	}

	if _, err := toks.Create(ctx, "ci-bot"); !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "revoke it first") {
		t.Errorf("second token of one name: %v", err)
	}
	list, err := toks.List(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "ci-bot" || list[0].LastUsed.IsZero() {
		t.Errorf("list: %+v, %v (want ci-bot, with a last use)", list, err)
	}

	if err := toks.Revoke(ctx, "ci-bot"); err != nil {
		t.Fatal(err)
	}
	if _, err := toks.Check(ctx, tok); !errors.Is(err, ErrBadToken) {
		t.Errorf("a revoked token still works: %v", err)
	}
	if err := toks.Revoke(ctx, "ci-bot"); !errors.Is(err, ErrNotFound) {
		t.Errorf("revoking twice: %v", err)
	}
}

func TestTokenRefusals(t *testing.T) {
	toks := NewTokens(mustDB(t))
	ctx := context.Background()
	for _, name := range []string{"", "../x", "a b", strings.Repeat("x", 65)} {
		if _, err := toks.Create(ctx, name); err == nil || !strings.Contains(err.Error(), "is not a token name") {
			t.Errorf("Create(%q): %v", name, err)
		}
	}
	for _, tok := range []string{"", "Bearer", "ms_", "ms_forged", "hf_abc"} {
		if _, err := toks.Check(ctx, tok); !errors.Is(err, ErrBadToken) {
			t.Errorf("Check(%q): %v", tok, err)
		}
	}
}

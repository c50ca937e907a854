package auth

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"modelserve/internal/testkit"
)

func mustDB(t *testing.T) *sql.DB {
	t.Helper()
	return testkit.OpenDB(t)
}

func TestTokenLifecycle(t *testing.T) {
	ctx := context.Background()
	db := mustDB(t)
	toks := NewTokens(db)

	tok, err := toks.Create(ctx, "ci-bot")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := toks.Check(ctx, tok); err != nil || got.Name != "ci-bot" || got.Scope != ScopeAll || !got.API() || !got.MayUse("any") {
		t.Fatalf("check of a new token: %+v, %v (want ci-bot, for everything)", got, err)
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

func TestTokenLimits(t *testing.T) {
	ctx := context.Background()
	toks := NewTokens(mustDB(t))

	for _, c := range []struct {
		name      string
		lim       Limits
		wantScope string
		api       bool
		mayUse    map[string]bool
	}{
		{"gateway-only", Limits{Scope: ScopeGateway}, ScopeGateway, false, map[string]bool{"a": true, "b": true}},
		{"two-models", Limits{Models: []string{"a", "b-alias"}}, ScopeGateway, false, map[string]bool{"a": true, "b-alias": true, "c": false}},
		{"everything", Limits{Scope: ScopeAll}, ScopeAll, true, map[string]bool{"c": true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tok, err := toks.CreateLimited(ctx, c.name, c.lim)
			if err != nil {
				t.Fatal(err)
			}
			got, err := toks.Check(ctx, tok)
			if err != nil {
				t.Fatal(err)
			}
			if got.Scope != c.wantScope || got.API() != c.api {
				t.Errorf("scope %q, API %v; want %q, %v", got.Scope, got.API(), c.wantScope, c.api)
			}
			for m, want := range c.mayUse {
				if got.MayUse(m) != want {
					t.Errorf("MayUse(%q) = %v, want %v", m, !want, want)
				}
			}
		})
	}
	list, err := toks.List(ctx)
	if err != nil || len(list) != 3 || list[1].Name != "gateway-only" || list[2].Scope != ScopeGateway || len(list[2].Models) != 2 {
		t.Errorf("list: %+v, %v", list, err)
	}

	for _, c := range []struct {
		lim  Limits
		want string
	}{
		{Limits{Scope: "admin"}, "is not a token scope"},
		{Limits{Scope: ScopeAll, Models: []string{"a"}}, "for the gateway only"},
		{Limits{Models: []string{"Bad Name"}}, "is not a model name"},
	} {
		if _, err := toks.CreateLimited(ctx, "refused", c.lim); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CreateLimited(%+v): %v, want %q", c.lim, err, c.want)
		}
	}
}

func TestBearerToken(t *testing.T) {
	for _, c := range []struct {
		header, want string
		ok           bool
	}{
		{"Bearer ms_x", "ms_x", true},
		{"bearer ms_x", "ms_x", true},
		{"BEARER  ms_x ", "ms_x", true},
		{"Basic abc", "", false},
		{"Bearer ", "", false},
		{"ms_x", "", false},
		{"", "", false},
	} {
		if got, ok := BearerToken(c.header); got != c.want || ok != c.ok {
			t.Errorf("BearerToken(%q) = %q, %v; want %q, %v", c.header, got, ok, c.want, c.ok)
		}
	}
}

// TestTokenCheckWaitsNotForTheWriteLock: a check whose token's last use is
// due to be noted, while another writer holds the database's write lock,
// answers at once rather than wait for the lock; the use is noted by the
// next check once the lock is free.
func TestTokenCheckWaitsNotForTheWriteLock(t *testing.T) {
	ctx := context.Background()
	db := mustDB(t)
	toks := NewTokens(db)
	tok, err := toks.Create(ctx, "gateway-client")
	if err != nil {
		t.Fatal(err)
	}
	lastUsed := func() string {
		t.Helper()
		var used sql.NullString
		if err := db.QueryRow(`SELECT last_used FROM api_tokens WHERE name = 'gateway-client'`).Scan(&used); err != nil {
			t.Fatal(err)
		}
		return used.String
	}

	// A long write elsewhere (a job's transaction) holds the lock.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	who, err := toks.Check(ctx, tok)
	took := time.Since(start)
	tx.Rollback()
	if err != nil || who.Name != "gateway-client" {
		t.Fatalf("check while the write lock is held: %+v, %v", who, err)
	}
	if took > 500*time.Millisecond {
		t.Errorf("the check took %v while another writer held the lock; want it not to wait for the lock", took)
	}
	if used := lastUsed(); used != "" {
		t.Errorf("last use noted as %q though the lock was held throughout", used)
	}

	// The lock free, the next check notes the use.
	if _, err := toks.Check(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if used := lastUsed(); used == "" {
		t.Error("the use was not noted once the lock was free")
	}
}

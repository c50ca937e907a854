// Package auth keeps who may use modelserve: API tokens for scripts and, for
// the console, users with passwords.
//
// Secrets are never stored as given: a token is kept as its sha256 and a
// password as a bcrypt hash, so the database alone lets nobody in.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/mattn/go-sqlite3"
)

// Errors a caller can tell apart.
var (
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
	// ErrBadToken is a bearer token that no one was given, or one revoked.
	ErrBadToken = errors.New("the token is not one modelserve issued, or it was revoked")
)

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// Tokens are the API's bearer tokens.
type Tokens struct {
	db  *sql.DB
	now func() time.Time
}

// NewTokens keeps tokens in db.
func NewTokens(db *sql.DB) *Tokens { return &Tokens{db: db, now: time.Now} }

// TokenInfo is what is known of a token without the token itself.
type TokenInfo struct {
	Name     string    `json:"name"`
	Created  time.Time `json:"created"`
	LastUsed time.Time `json:"last_used,omitzero"`
}

// tokenPrefix makes a leaked token recognisable to secret scanners and to
// whoever finds it in a shell history.
const tokenPrefix = "ms_"

func hashToken(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
}

// Create makes a token called name and returns it: the only time it is ever
// shown.
func (t *Tokens) Create(ctx context.Context, name string) (string, error) {
	if !namePattern.MatchString(name) {
		return "", fmt.Errorf("%q is not a token name: use letters, digits and ._@- (at most 64)", name)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	tok := tokenPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	_, err := t.db.ExecContext(ctx, `INSERT INTO api_tokens (name, hash, created_at) VALUES (?, ?, ?)`,
		name, hashToken(tok), t.now().UTC().Format(time.RFC3339Nano))
	var se sqlite3.Error
	if errors.As(err, &se) && se.ExtendedCode == sqlite3.ErrConstraintPrimaryKey {
		return "", fmt.Errorf("a token called %q %w: revoke it first, or choose another name", name, ErrExists)
	}
	if err != nil {
		return "", fmt.Errorf("create token %q: %w", name, err)
	}
	return tok, nil
}

// List is every token's name and dates, by name.
func (t *Tokens) List(ctx context.Context) ([]TokenInfo, error) {
	rows, err := t.db.QueryContext(ctx, `SELECT name, created_at, COALESCE(last_used, '') FROM api_tokens ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []TokenInfo
	for rows.Next() {
		var ti TokenInfo
		var created, used string
		if err := rows.Scan(&ti.Name, &created, &used); err != nil {
			return nil, err
		}
		ti.Created, _ = time.Parse(time.RFC3339Nano, created)
		ti.LastUsed, _ = time.Parse(time.RFC3339Nano, used)
		out = append(out, ti)
	}
	return out, rows.Err()
}

// Revoke deletes the token called name; requests carrying it fail from now on.
func (t *Tokens) Revoke(ctx context.Context, name string) error {
	res, err := t.db.ExecContext(ctx, `DELETE FROM api_tokens WHERE name = ?`, name)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("no token is called %q (%w); modelserve token list shows them", name, ErrNotFound)
	}
	return nil
}

// Check returns the name of the token tok, or ErrBadToken. Only the hash is
// compared, and the hash is of 32 random bytes, so the lookup leaks nothing
// worth timing.
func (t *Tokens) Check(ctx context.Context, tok string) (string, error) {
	if !strings.HasPrefix(tok, tokenPrefix) {
		return "", ErrBadToken
	}
	var name, used string
	err := t.db.QueryRowContext(ctx, `SELECT name, COALESCE(last_used, '') FROM api_tokens WHERE hash = ?`, hashToken(tok)).Scan(&name, &used)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ErrBadToken
	}
	if err != nil {
		return "", err
	}
	// Last use to the minute is enough to tell a live token from a
	// forgotten one, without a write on every request.
	now := t.now().UTC()
	if last, _ := time.Parse(time.RFC3339Nano, used); now.Sub(last) > time.Minute {
		t.db.ExecContext(ctx, `UPDATE api_tokens SET last_used = ? WHERE name = ?`, now.Format(time.RFC3339Nano), name)
	}
	return name, nil
}

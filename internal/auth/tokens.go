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
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-sqlite3"

	"modelserve/internal/operr"
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

	mu       sync.Mutex
	onRevoke []func()
}

// OnRevoke has f called after each token revoked through t, before Revoke
// returns: whoever keeps tokens it checked (the gateway) lets go of them
// then, not when its while is over.
func (t *Tokens) OnRevoke(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onRevoke = append(t.onRevoke, f)
}

// NewTokens keeps tokens in db.
func NewTokens(db *sql.DB) *Tokens { return &Tokens{db: db, now: time.Now} }

// TokenInfo is what is known of a token without the token itself.
type TokenInfo struct {
	Name     string    `json:"name"`
	Created  time.Time `json:"created"`
	LastUsed time.Time `json:"last_used,omitzero"`
	// Scope and Models are what it may do (see Limits).
	Scope  string   `json:"scope"`
	Models []string `json:"models,omitempty"`
}

// The scopes of a token: ScopeAll reaches the console's JSON API and the
// gateway, ScopeGateway the gateway (/v1/...) alone.
const (
	ScopeAll     = "all"
	ScopeGateway = "gateway"
)

// Limits are what a new token may do. The zero value is everything.
type Limits struct {
	// Scope is ScopeAll or ScopeGateway; empty is ScopeAll, or
	// ScopeGateway when Models is set.
	Scope string
	// Models are the catalog names or aliases it may call through the
	// gateway; none is every model. A token limited to models is
	// gateway-only: the console's API is not per model, and a token for
	// one model that could delete another from the catalog would surprise
	// whoever handed it out.
	Models []string
}

// Token is who a checked bearer token is and what it may do.
type Token struct {
	Name   string
	Scope  string
	Models []string
}

// API is whether the token may use the console's JSON API (/api/v1/).
func (t Token) API() bool { return t.Scope != ScopeGateway }

// MayUse is whether the token may call a model through the gateway by any
// of names (the model's catalog name and the name it was asked by).
func (t Token) MayUse(names ...string) bool {
	if len(t.Models) == 0 {
		return true
	}
	for _, n := range names {
		if slices.Contains(t.Models, n) {
			return true
		}
	}
	return false
}

// tokenPrefix makes a leaked token recognisable to secret scanners and to
// whoever finds it in a shell history.
const tokenPrefix = "ms_"

func hashToken(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
}

// Create makes a token called name that may do everything, and returns
// it: the only time it is ever shown.
func (t *Tokens) Create(ctx context.Context, name string) (string, error) {
	return t.CreateLimited(ctx, name, Limits{})
}

// modelPattern is what a model name in a token's limits may be: the
// catalog's names and aliases are lowercase letters, digits and ._-.
var modelPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// CreateLimited is Create for a token that may do only what lim says.
func (t *Tokens) CreateLimited(ctx context.Context, name string, lim Limits) (string, error) {
	if !namePattern.MatchString(name) {
		return "", fmt.Errorf("%s is not a token name: use letters, digits and ._@- (at most 64)", operr.Quote(name))
	}
	scope := lim.Scope
	switch {
	case scope == "" && len(lim.Models) > 0:
		scope = ScopeGateway
	case scope == "":
		scope = ScopeAll
	case scope == ScopeAll && len(lim.Models) > 0:
		return "", fmt.Errorf("a token limited to models is for the gateway only: drop --scope all, or the model list")
	case scope != ScopeAll && scope != ScopeGateway:
		return "", fmt.Errorf("%s is not a token scope: use all (the API and the gateway) or gateway (/v1/ only)", operr.Quote(scope))
	}
	for _, m := range lim.Models {
		if !modelPattern.MatchString(m) {
			return "", fmt.Errorf("%s is not a model name: name catalog models or aliases (lowercase letters, digits and ._-), separated by commas", operr.Quote(m))
		}
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	tok := tokenPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	_, err := t.db.ExecContext(ctx, `INSERT INTO api_tokens (name, hash, created_at, scope, models) VALUES (?, ?, ?, ?, ?)`,
		name, hashToken(tok), t.now().UTC().Format(time.RFC3339Nano), scope, strings.Join(lim.Models, ","))
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
	rows, err := t.db.QueryContext(ctx, `SELECT name, created_at, COALESCE(last_used, ''), scope, models FROM api_tokens ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []TokenInfo
	for rows.Next() {
		var ti TokenInfo
		var created, used, models string
		if err := rows.Scan(&ti.Name, &created, &used, &ti.Scope, &models); err != nil {
			return nil, err
		}
		ti.Models = splitModels(models)
		ti.Created, _ = time.Parse(time.RFC3339Nano, created)
		ti.LastUsed, _ = time.Parse(time.RFC3339Nano, used)
		out = append(out, ti)
	}
	return out, rows.Err()
}

// Revoke deletes the token called name; requests carrying it fail from now
// on, at the gateway too when it is told (OnRevoke): a token revoked by
// another process (modelserve token revoke) reaches the gateway within its
// Options.TokenEvery.
func (t *Tokens) Revoke(ctx context.Context, name string) error {
	res, err := t.db.ExecContext(ctx, `DELETE FROM api_tokens WHERE name = ?`, name)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("no token is called %s (%w); modelserve token list shows them", operr.Quote(name), ErrNotFound)
	}
	t.mu.Lock()
	hooks := slices.Clone(t.onRevoke)
	t.mu.Unlock()
	for _, f := range hooks {
		f()
	}
	return nil
}

// Check returns who the token tok is and what it may do, or ErrBadToken.
// Only the hash is compared, and the hash is of 32 random bytes, so the
// lookup leaks nothing worth timing.
func (t *Tokens) Check(ctx context.Context, tok string) (Token, error) {
	if !strings.HasPrefix(tok, tokenPrefix) {
		return Token{}, ErrBadToken
	}
	var out Token
	var used, models string
	err := t.db.QueryRowContext(ctx, `SELECT name, COALESCE(last_used, ''), scope, models FROM api_tokens WHERE hash = ?`,
		hashToken(tok)).Scan(&out.Name, &used, &out.Scope, &models)
	if errors.Is(err, sql.ErrNoRows) {
		return Token{}, ErrBadToken
	}
	if err != nil {
		return Token{}, err
	}
	out.Models = splitModels(models)
	// Last use to the minute is enough to tell a live token from a
	// forgotten one, without a write on every request.
	now := t.now().UTC()
	if last, _ := time.Parse(time.RFC3339Nano, used); now.Sub(last) > time.Minute {
		t.touch(ctx, out.Name, now)
	}
	return out, nil
}

// touchWait bounds how long a check waits to note a token's use. The note
// is a write, and the write lock may be held for a second or more while a
// hundred jobs write their steps; a gateway request checked then waited
// for it, for a date no request needs. A use not noted in time is noted
// by a later check: the date stays as it was until one is.
const touchWait = 20 * time.Millisecond

// touch notes that the token called name was used at now, if the write
// lock comes within touchWait.
func (t *Tokens) touch(ctx context.Context, name string, now time.Time) {
	ctx, cancel := context.WithTimeout(ctx, touchWait)
	defer cancel()
	t.db.ExecContext(ctx, `UPDATE api_tokens SET last_used = ? WHERE name = ?`, now.Format(time.RFC3339Nano), name)
}

// splitModels is the models column as a list; empty is none (every model).
func splitModels(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// BearerToken is the token of an Authorization header value
// ("Bearer <token>"), with the scheme's name in any case (RFC 9110: it is
// case-insensitive, and some clients send "bearer").
func BearerToken(header string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

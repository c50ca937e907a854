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
	"time"

	"modelserve/internal/operr"
	"modelserve/internal/words"
)

// Console sessions live on the server, one row each (migration 0008): the
// cookie carries a random secret and nothing else about who is signed in.
// A session kept only in a signed cookie cannot be ended: a copy of the
// cookie stays good until it expires, whatever sign-out does. Deleting the
// row ends every copy at once.

// ErrNoSession is a session secret that names no live session: never
// issued, signed out, revoked, expired, or its user removed.
var ErrNoSession = errors.New("no such session")

// touchEvery is how stale a session's last_seen may get before a request
// writes it again: a write per page view would be a write per click.
const touchEvery = time.Minute

// Sessions are the console's signed-in sessions.
type Sessions struct {
	db  *sql.DB
	now func() time.Time
}

// NewSessions keeps sessions in db.
func NewSessions(db *sql.DB) *Sessions { return &Sessions{db: db, now: time.Now} }

// Session is one signed-in session, as listed: never its secret.
type Session struct {
	// ID names the session for listing and revoking; it signs nobody in.
	ID        string    `json:"id"`
	User      string    `json:"user"`
	Created   time.Time `json:"created"`
	LastSeen  time.Time `json:"last_seen"`
	Expires   time.Time `json:"expires"`
	UserAgent string    `json:"user_agent"`
	Address   string    `json:"address"`
}

// Client is where a sign-in came from, kept with its session so that an
// operator listing sessions can tell a stranger's from their own.
type Client struct {
	UserAgent string
	Address   string
}

func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Start signs user in for ttl and returns the secret for the cookie: the
// only place it exists, as only its hash is kept.
func (s *Sessions) Start(ctx context.Context, user string, ttl time.Duration, c Client) (string, Session, error) {
	var b [32]byte
	rand.Read(b[:])
	secret := base64.RawURLEncoding.EncodeToString(b[:])
	var idb [8]byte
	rand.Read(idb[:])
	now := s.now()
	sess := Session{
		ID: hex.EncodeToString(idb[:]), User: user, Created: now, LastSeen: now, Expires: now.Add(ttl),
		UserAgent: words.Clip(c.UserAgent), Address: words.Clip(c.Address),
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", Session{}, fmt.Errorf("start a session for %s: %w", user, err)
	}
	defer tx.Rollback()
	// Expired rows go when a new one comes: nothing else needs them, and
	// no loop is needed to sweep them.
	if _, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE expires_at <= ?`, now.Unix()); err != nil {
		return "", Session{}, fmt.Errorf("start a session for %s: %w", user, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO sessions (id, secret_hash, user, created_at, last_seen, expires_at, user_agent, address)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		sess.ID, hashSecret(secret), user, now.Unix(), now.Unix(), sess.Expires.Unix(), sess.UserAgent, sess.Address); err != nil {
		return "", Session{}, fmt.Errorf("start a session for %s: %w", user, err)
	}
	if err := tx.Commit(); err != nil {
		return "", Session{}, fmt.Errorf("start a session for %s: %w", user, err)
	}
	return secret, sess, nil
}

// Find is the live session whose secret this is, with its user's name as
// stored; ErrNoSession when there is none. It notes the visit in last_seen
// at most once a minute.
func (s *Sessions) Find(ctx context.Context, secret string) (Session, error) {
	if secret == "" {
		return Session{}, ErrNoSession
	}
	now := s.now()
	var sess Session
	var created, seen, expires int64
	// Joined with users: a session never outlives its user, even should a
	// row be left by a database edited by hand without foreign keys.
	err := s.db.QueryRowContext(ctx, `SELECT s.id, u.name, s.created_at, s.last_seen, s.expires_at, s.user_agent, s.address
		FROM sessions s JOIN users u ON u.name = s.user
		WHERE s.secret_hash = ? AND s.expires_at > ?`, hashSecret(secret), now.Unix()).
		Scan(&sess.ID, &sess.User, &created, &seen, &expires, &sess.UserAgent, &sess.Address)
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, ErrNoSession
	}
	if err != nil {
		return Session{}, fmt.Errorf("read a session: %w", err)
	}
	sess.Created, sess.LastSeen, sess.Expires = time.Unix(created, 0), time.Unix(seen, 0), time.Unix(expires, 0)
	if now.Sub(sess.LastSeen) >= touchEvery {
		if _, err := s.db.ExecContext(ctx, `UPDATE sessions SET last_seen = ? WHERE id = ?`, now.Unix(), sess.ID); err != nil {
			return Session{}, fmt.Errorf("note the visit of session %s: %w", sess.ID, err)
		}
		sess.LastSeen = time.Unix(now.Unix(), 0)
	}
	return sess, nil
}

// End deletes the session whose secret this is (signing out). A secret
// that names no session is no error: it is signed out already.
func (s *Sessions) End(ctx context.Context, secret string) error {
	if secret == "" {
		return nil
	}
	if _, err := s.db.ExecContext(ctx, `DELETE FROM sessions WHERE secret_hash = ?`, hashSecret(secret)); err != nil {
		return fmt.Errorf("end a session: %w", err)
	}
	return nil
}

// Revoke deletes the session with that id, as listed.
func (s *Sessions) Revoke(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM sessions WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("revoke session %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return operr.Wrap(operr.NotFound, ErrNoSession, "there is no session %s: modelserve session list shows the sessions there are", operr.Quote(id))
	}
	return nil
}

// RevokeUser deletes every session of user and says how many there were.
func (s *Sessions) RevokeUser(ctx context.Context, user string) (int, error) {
	return revokeUser(ctx, s.db, user)
}

// execer is a database or a transaction: a password change revokes
// sessions in its own transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func revokeUser(ctx context.Context, db execer, user string) (int, error) {
	res, err := db.ExecContext(ctx, `DELETE FROM sessions WHERE user = ?`, user)
	if err != nil {
		return 0, fmt.Errorf("revoke the sessions of %s: %w", user, err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// RevokeAll deletes every session: everyone signs in again.
func (s *Sessions) RevokeAll(ctx context.Context) (int, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM sessions`)
	if err != nil {
		return 0, fmt.Errorf("revoke every session: %w", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// List is the live sessions, of user alone when user is not "", newest
// first.
func (s *Sessions) List(ctx context.Context, user string) ([]Session, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, user, created_at, last_seen, expires_at, user_agent, address
		FROM sessions WHERE expires_at > ? AND (? = '' OR user = ?) ORDER BY created_at DESC, id`,
		s.now().Unix(), user, user)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	defer rows.Close()
	var out []Session
	for rows.Next() {
		var sess Session
		var created, seen, expires int64
		if err := rows.Scan(&sess.ID, &sess.User, &created, &seen, &expires, &sess.UserAgent, &sess.Address); err != nil {
			return nil, fmt.Errorf("list sessions: %w", err)
		}
		sess.Created, sess.LastSeen, sess.Expires = time.Unix(created, 0), time.Unix(seen, 0), time.Unix(expires, 0)
		out = append(out, sess)
	}
	return out, rows.Err()
}

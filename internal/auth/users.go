package auth

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mattn/go-sqlite3"
	"golang.org/x/crypto/bcrypt"

	"modelserve/internal/operr"
)

// ErrBadPassword is a sign-in with a name no user has, or the wrong
// password: the two are not told apart, so the console does not say which
// names exist.
var ErrBadPassword = errors.New("that name and password do not match a user")

// Password lengths. bcrypt reads at most 72 bytes and ignores the rest, so
// a longer password is refused rather than quietly cut.
const (
	MinPassword = 10
	maxPassword = 72
)

// AdminName is the user EnsureAdmin makes on a first start.
const AdminName = "admin"

// Users are the people who sign in to the console.
type Users struct {
	db   *sql.DB
	now  func() time.Time
	cost int
}

// NewUsers keeps users in db.
func NewUsers(db *sql.DB) *Users { return &Users{db: db, now: time.Now, cost: bcrypt.DefaultCost} }

// UserInfo is what is known of a user without the password.
type UserInfo struct {
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
}

// Add makes a user with that password. A name taken (in any case) is
// refused with an error matching ErrExists.
func (u *Users) Add(ctx context.Context, name, password string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("%s is not a user name: use letters, digits and ._@- (at most 64), starting with a letter or digit", operr.Quote(name))
	}
	if err := checkPassword(password); err != nil {
		return err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), u.cost)
	if err != nil {
		return fmt.Errorf("hash the password of %s: %w", name, err)
	}
	_, err = u.db.ExecContext(ctx, `INSERT INTO users (name, password_hash, created_at) VALUES (?, ?, ?)`,
		name, string(hash), u.now().UTC().Format(time.RFC3339Nano))
	if isConstraint(err) {
		return fmt.Errorf("a user called %q %w: choose another name", name, ErrExists)
	}
	if err != nil {
		return fmt.Errorf("add user %s: %w", name, err)
	}
	return nil
}

func checkPassword(p string) error {
	switch {
	case len(p) < MinPassword:
		return fmt.Errorf("the password is %d characters; give at least %d, or none to have one generated", len(p), MinPassword)
	case len(p) > maxPassword:
		return fmt.Errorf("the password is %d bytes; bcrypt reads only the first %d, so give at most that", len(p), maxPassword)
	}
	return nil
}

func isConstraint(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.Code == sqlite3.ErrConstraint
}

// dummyHash is compared against when the name is unknown, so that a
// sign-in with a name nobody has takes as long as one with a wrong
// password, and the time does not tell which names exist. Made when first
// needed: a tenth of a second at start for nothing, otherwise.
var dummyHash = sync.OnceValue(func() []byte {
	h, _ := bcrypt.GenerateFromPassword([]byte("modelserve: no such user"), bcrypt.DefaultCost)
	return h
})

// Authenticate returns the user's name as stored when password is theirs,
// and ErrBadPassword when the name is unknown or the password wrong.
func (u *Users) Authenticate(ctx context.Context, name, password string) (string, error) {
	var stored, hash string
	err := u.db.QueryRowContext(ctx, `SELECT name, password_hash FROM users WHERE name = ?`, name).Scan(&stored, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		bcrypt.CompareHashAndPassword(dummyHash(), []byte(password))
		return "", ErrBadPassword
	}
	if err != nil {
		return "", fmt.Errorf("read user %s: %w", name, err)
	}
	if bcrypt.CompareHashAndPassword([]byte(hash), []byte(password)) != nil {
		return "", ErrBadPassword
	}
	return stored, nil
}

// Exists reports whether a user of that name is there.
func (u *Users) Exists(ctx context.Context, name string) (bool, error) {
	var n int
	if err := u.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM users WHERE name = ?`, name).Scan(&n); err != nil {
		return false, fmt.Errorf("read user %s: %w", name, err)
	}
	return n > 0, nil
}

// List is every user, by name.
func (u *Users) List(ctx context.Context) ([]UserInfo, error) {
	rows, err := u.db.QueryContext(ctx, `SELECT name, created_at FROM users ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	defer rows.Close()
	var out []UserInfo
	for rows.Next() {
		var ui UserInfo
		var created string
		if err := rows.Scan(&ui.Name, &created); err != nil {
			return nil, fmt.Errorf("list users: %w", err)
		}
		ui.Created, _ = time.Parse(time.RFC3339Nano, created)
		out = append(out, ui)
	}
	return out, rows.Err()
}

// SetPassword gives user a new password and ends every session they have:
// whoever changes a password because it leaked wants the one who took it
// out too, not only kept out from now on.
func (u *Users) SetPassword(ctx context.Context, name, password string) (revoked int, err error) {
	if err := checkPassword(password); err != nil {
		return 0, err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), u.cost)
	if err != nil {
		return 0, fmt.Errorf("hash the password of %s: %w", name, err)
	}
	tx, err := u.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("change the password of %s: %w", name, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE users SET password_hash = ? WHERE name = ?`, string(hash), name)
	if err != nil {
		return 0, fmt.Errorf("change the password of %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return 0, noUser(name)
	}
	if revoked, err = revokeUser(ctx, tx, name); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("change the password of %s: %w", name, err)
	}
	return revoked, nil
}

// Remove deletes user; the database deletes their sessions with them
// (ON DELETE CASCADE), so whoever was signed in as them is out at once.
// It says how many sessions ended.
func (u *Users) Remove(ctx context.Context, name string) (revoked int, err error) {
	tx, err := u.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("remove user %s: %w", name, err)
	}
	defer tx.Rollback()
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM sessions WHERE user = ?`, name).Scan(&revoked); err != nil {
		return 0, fmt.Errorf("remove user %s: %w", name, err)
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM users WHERE name = ?`, name)
	if err != nil {
		return 0, fmt.Errorf("remove user %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return 0, noUser(name)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("remove user %s: %w", name, err)
	}
	return revoked, nil
}

func noUser(name string) error {
	return fmt.Errorf("no user is called %s (%w): modelserve user list shows them", operr.Quote(name), ErrNotFound)
}

// GeneratePassword makes a password of 144 random bits, in characters that
// survive a terminal, a URL and a password manager.
func GeneratePassword() string {
	var b [18]byte
	// crypto/rand does not fail on the systems Go supports.
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// EnsureAdmin makes the user "admin" with a generated password when there
// is no user at all, so that a first start can be signed in to: the caller
// prints the password once. With any user there already, it does nothing
// and returns created false.
func EnsureAdmin(ctx context.Context, db *sql.DB) (password string, created bool, err error) {
	u := NewUsers(db)
	password = GeneratePassword()
	hash, err := bcrypt.GenerateFromPassword([]byte(password), u.cost)
	if err != nil {
		return "", false, fmt.Errorf("hash the admin password: %w", err)
	}
	// One statement: two processes starting at once cannot both make one.
	res, err := db.ExecContext(ctx, `INSERT INTO users (name, password_hash, created_at)
		SELECT ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM users)`,
		AdminName, string(hash), u.now().UTC().Format(time.RFC3339Nano))
	if err != nil {
		return "", false, fmt.Errorf("create the first user: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return "", false, nil
	}
	return password, true, nil
}

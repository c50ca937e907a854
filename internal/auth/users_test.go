package auth

import (
	"context"
	"errors"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// mustUsers is a user store with the cheapest bcrypt cost: the tests check
// what is kept and compared, not how slow the hash is.
func mustUsers(t *testing.T) *Users {
	t.Helper()
	u := NewUsers(mustDB(t))
	u.cost = bcrypt.MinCost
	return u
}

func TestUserLifecycle(t *testing.T) {
	ctx := context.Background()
	u := mustUsers(t)
	if err := u.Add(ctx, "Ada", "correct horse battery"); err != nil {
		t.Fatal(err)
	}
	name, err := u.Authenticate(ctx, "ada", "correct horse battery")
	if err != nil || name != "Ada" {
		t.Fatalf("sign-in with the right password, another case: %q, %v", name, err)
	}

	for _, tc := range []struct{ name, user, password string }{
		{"wrong password", "Ada", "correct horse staple"},
		{"unknown user", "bob", "correct horse battery"},
		{"empty password", "Ada", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := u.Authenticate(ctx, tc.user, tc.password); !errors.Is(err, ErrBadPassword) {
				t.Fatalf("got %v, want ErrBadPassword", err)
			}
		})
	}

	// Only a bcrypt hash is kept.
	var stored string
	u.db.QueryRow(`SELECT password_hash FROM users`).Scan(&stored)
	if strings.Contains(stored, "horse") || !strings.HasPrefix(stored, "$2") {
		t.Fatalf("stored %q, want a bcrypt hash", stored)
	}
	if ok, _ := u.Exists(ctx, "ADA"); !ok {
		t.Fatal("Exists does not find the user in another case")
	}
}

func TestAddRefuses(t *testing.T) {
	ctx := context.Background()
	u := mustUsers(t)
	if err := u.Add(ctx, "ada", "long enough pw"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, user, password, want string
		is                         error
	}{
		{name: "taken in another case", user: "ADA", password: "long enough pw", want: "already exists", is: ErrExists},
		{name: "short password", user: "bob", password: "short", want: "at least 10"},
		{name: "password bcrypt would cut", user: "bob", password: strings.Repeat("x", 73), want: "at most"},
		{name: "bad name", user: "bob smith", password: "long enough pw", want: "not a user name"},
		{name: "empty name", user: "", password: "long enough pw", want: "not a user name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := u.Add(ctx, tc.user, tc.password)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("got %v, want it to match %v", err, tc.is)
			}
		})
	}
	list, _ := u.List(ctx)
	if len(list) != 1 {
		t.Fatalf("refused users were kept: %+v", list)
	}
}

func TestEnsureAdmin(t *testing.T) {
	ctx := context.Background()
	db := mustDB(t)
	pw, created, err := EnsureAdmin(ctx, db)
	if err != nil || !created || len(pw) < MinPassword {
		t.Fatalf("first start: %q, %v, %v", pw, created, err)
	}
	if _, err := NewUsers(db).Authenticate(ctx, AdminName, pw); err != nil {
		t.Fatalf("the printed password does not sign in: %v", err)
	}
	pw2, created, err := EnsureAdmin(ctx, db)
	if err != nil || created || pw2 != "" {
		t.Fatalf("second start made another admin: %q, %v, %v", pw2, created, err)
	}
	if _, err := NewUsers(db).Authenticate(ctx, AdminName, pw); err != nil {
		t.Fatalf("a second start changed the password: %v", err)
	}
}

func TestEnsureAdminLeavesExistingUsers(t *testing.T) {
	ctx := context.Background()
	db := mustDB(t)
	if err := NewUsers(db).Add(ctx, "ops", "long enough pw"); err != nil {
		t.Fatal(err)
	}
	if _, created, err := EnsureAdmin(ctx, db); err != nil || created {
		t.Fatalf("made an admin beside an existing user: %v, %v", created, err)
	}
}

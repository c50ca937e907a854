package auth

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSessionLifecycle(t *testing.T) {
	ctx := context.Background()
	u := mustUsers(t)
	for _, name := range []string{"ada", "bob"} {
		if err := u.Add(ctx, name, "correct horse battery"); err != nil {
			t.Fatal(err)
		}
	}
	s := NewSessions(u.db)
	now := time.Unix(1_700_000_000, 0)
	s.now = func() time.Time { return now }

	secret, sess, err := s.Start(ctx, "ada", time.Hour, Client{UserAgent: strings.Repeat("x", 1000), Address: "192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(sess.UserAgent) > 250 || !strings.HasSuffix(sess.UserAgent, "x… (800 bytes cut)") {
		t.Errorf("kept a user agent of %d bytes: %s", len(sess.UserAgent), sess.UserAgent)
	}
	var stored int
	if err := u.db.QueryRow(`SELECT COUNT(*) FROM sessions WHERE secret_hash = ? OR id = ?`, secret, secret).Scan(&stored); err != nil || stored != 0 {
		t.Fatalf("the cookie's secret is in the database (%v): a copy of it would sign anyone in", err)
	}
	got, err := s.Find(ctx, secret)
	if err != nil || got.User != "ada" || got.ID != sess.ID {
		t.Fatalf("Find: %+v, %v", got, err)
	}
	if _, err := s.Find(ctx, secret+"x"); !errors.Is(err, ErrNoSession) {
		t.Fatalf("another secret: %v, want ErrNoSession", err)
	}

	// last_seen moves at most once a minute, and the session ends at its
	// expiry.
	now = now.Add(2 * time.Minute)
	if got, _ := s.Find(ctx, secret); !got.LastSeen.Equal(now) {
		t.Errorf("last seen %v, want %v", got.LastSeen, now)
	}
	now = now.Add(time.Hour)
	if _, err := s.Find(ctx, secret); !errors.Is(err, ErrNoSession) {
		t.Fatalf("an expired session: %v, want ErrNoSession", err)
	}

	a1, _, _ := s.Start(ctx, "ada", time.Hour, Client{})
	a2, _, _ := s.Start(ctx, "ADA", time.Hour, Client{})
	b1, bs, _ := s.Start(ctx, "bob", time.Hour, Client{})
	if list, _ := s.List(ctx, "ada"); len(list) != 2 {
		t.Fatalf("ada has %d live sessions listed, want 2 (the expired one gone)", len(list))
	}
	if err := s.End(ctx, a1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Find(ctx, a1); !errors.Is(err, ErrNoSession) {
		t.Fatal("a session signed out of is still there")
	}
	if n, err := s.RevokeUser(ctx, "Ada"); err != nil || n != 1 {
		t.Fatalf("revoked %d of ada's sessions (%v), want 1", n, err)
	}
	if _, err := s.Find(ctx, a2); !errors.Is(err, ErrNoSession) {
		t.Fatal("a revoked session is still there")
	}
	if err := s.Revoke(ctx, "0123"); err == nil || !strings.Contains(err.Error(), "session list") {
		t.Fatalf("revoking an unknown id: %v", err)
	}
	if err := s.Revoke(ctx, bs.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Find(ctx, b1); !errors.Is(err, ErrNoSession) {
		t.Fatal("a session revoked by id is still there")
	}
}

func TestPasswordChangeAndRemovalRevokeSessions(t *testing.T) {
	ctx := context.Background()
	u := mustUsers(t)
	if err := u.Add(ctx, "ada", "correct horse battery"); err != nil {
		t.Fatal(err)
	}
	s := NewSessions(u.db)
	one, _, _ := s.Start(ctx, "ada", time.Hour, Client{})
	two, _, _ := s.Start(ctx, "ada", time.Hour, Client{})
	if n, err := u.SetPassword(ctx, "ada", "battery staple horse"); err != nil || n != 2 {
		t.Fatalf("password change revoked %d (%v), want 2", n, err)
	}
	for _, sec := range []string{one, two} {
		if _, err := s.Find(ctx, sec); !errors.Is(err, ErrNoSession) {
			t.Fatal("a session outlived its user's password change")
		}
	}
	if _, err := u.Authenticate(ctx, "ada", "battery staple horse"); err != nil {
		t.Fatalf("the new password does not work: %v", err)
	}
	if _, err := u.SetPassword(ctx, "ada", "short"); err == nil {
		t.Fatal("a short password was taken")
	}
	if _, err := u.SetPassword(ctx, "nobody", "long enough password"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("changing a missing user's password: %v", err)
	}

	three, _, _ := s.Start(ctx, "ada", time.Hour, Client{})
	if n, err := u.Remove(ctx, "ADA"); err != nil || n != 1 {
		t.Fatalf("removal ended %d sessions (%v), want 1", n, err)
	}
	if _, err := s.Find(ctx, three); !errors.Is(err, ErrNoSession) {
		t.Fatal("a session outlived its user")
	}
	if ok, _ := u.Exists(ctx, "ada"); ok {
		t.Fatal("the user is still there")
	}
	if _, err := u.Remove(ctx, "ada"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("removing a missing user: %v", err)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"modelserve/internal/auth"
	"modelserve/internal/testkit"
)

func TestUserAdd(t *testing.T) {
	ctx := context.Background()
	dir := madeDataDir(t)
	getenv := func(string) string { return "" }
	signIn := func(t *testing.T, name, password string) {
		t.Helper()
		db := testkit.OpenDBFile(t, filepath.Join(dir, "modelserve.db"))
		defer db.Close()
		if _, err := auth.NewUsers(db).Authenticate(ctx, name, password); err != nil {
			t.Fatalf("%s cannot sign in with %q: %v", name, password, err)
		}
	}

	t.Run("password from stdin", func(t *testing.T) {
		var out, errOut bytes.Buffer
		err := run(ctx, []string{"user", "add", "--data", dir, "ada"}, getenv,
			strings.NewReader("a long password\n"), &out, &errOut)
		if err != nil {
			t.Fatal(err)
		}
		if out.Len() != 0 {
			t.Fatalf("printed %q; a password given is never printed", out.String())
		}
		signIn(t, "ada", "a long password")
	})

	t.Run("generated and printed once", func(t *testing.T) {
		var out, errOut bytes.Buffer
		if err := run(ctx, []string{"user", "add", "--data", dir, "bob"}, getenv, strings.NewReader(""), &out, &errOut); err != nil {
			t.Fatal(err)
		}
		pw := strings.TrimSpace(out.String())
		if len(pw) < auth.MinPassword || !strings.Contains(errOut.String(), "only this once") {
			t.Fatalf("stdout %q, stderr %q", out.String(), errOut.String())
		}
		signIn(t, "bob", pw)
	})

	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		want  string
	}{
		{"taken name", []string{"user", "add", "--data", dir, "ADA"}, "another long one\n", "already exists"},
		{"short password", []string{"user", "add", "--data", dir, "cy"}, "short\n", "at least"},
		{"no name", []string{"user", "add", "--data", dir}, "", "takes one name"},
		{"no command", []string{"user"}, "", "needs a command"},
		{"unknown command", []string{"user", "frob"}, "", "not a user command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(ctx, tc.args, getenv, strings.NewReader(tc.stdin), &out, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}

	var out bytes.Buffer
	if err := run(ctx, []string{"user", "list", "--data", dir}, getenv, nil, &out, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "ada") || !strings.Contains(out.String(), "bob") {
		t.Fatalf("user list:\n%s", out.String())
	}
	// For scripts, as every listing: --output json, flags after the command.
	out.Reset()
	if err := run(ctx, []string{"user", "list", "--data", dir, "-o", "json"}, getenv, nil, &out, &out); err != nil {
		t.Fatal(err)
	}
	var users []struct{ Name string }
	if err := json.Unmarshal(out.Bytes(), &users); err != nil || len(users) != 2 || users[0].Name != "ada" || users[1].Name != "bob" {
		t.Fatalf("user list -o json: %v\n%s", err, out.String())
	}
}

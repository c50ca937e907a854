package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// madeDataDir is a data directory as the server leaves it on its first
// start: with its database, which the data commands need.
func madeDataDir(t *testing.T) string {
	t.Helper()
	return mustMakeData(t, t.TempDir())
}

// mustMakeData makes the database in dir, as the server's first start
// does, and returns dir.
func mustMakeData(t testing.TB, dir string) string {
	t.Helper()
	db, err := openData(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestInitMakesTheDatabase: init makes the database the data commands
// need, and a second init changes nothing.
func TestInitMakesTheDatabase(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	for i, want := range []string{"made a modelserve database in " + dir, dir + " holds a modelserve database already"} {
		var said strings.Builder
		if err := run(context.Background(), []string{"init", "--data", dir}, func(string) string { return "" }, nil, io.Discard, &said); err != nil {
			t.Fatalf("init %d: %v", i, err)
		}
		if !strings.Contains(said.String(), want) {
			t.Errorf("init %d said %q, want %q", i, said.String(), want)
		}
		if i == 0 {
			mustRun(t, "a long password\n", "user", "add", "--data", dir, "ada")
		}
	}
	if out, _ := mustRun(t, "", "user", "list", "--data", dir); !strings.Contains(out, "ada") {
		t.Errorf("a second init lost the users: %q", out)
	}
}

// TestDataCommandsRefuseAFolderWithoutADatabase: a token made in a folder
// the server does not read would be answered 401, so every command that
// takes --data refuses a folder with no database, says which, and leaves
// no database behind.
func TestDataCommandsRefuseAFolderWithoutADatabase(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
	}{
		{"token create", []string{"token", "create", "app"}, ""},
		{"token list", []string{"token", "list"}, ""},
		{"user add", []string{"user", "add", "ada"}, "a long password\n"},
		{"user list", []string{"user", "list"}, ""},
		{"session list", []string{"session", "list"}, ""},
		{"keys rotate", []string{"keys", "rotate"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, how := range []string{"flag", "env", "missing folder"} {
				dir := t.TempDir()
				if how == "missing folder" {
					dir = filepath.Join(dir, "nowhere")
				}
				args, env := tc.args, func(string) string { return "" }
				if how == "env" {
					env = func(k string) string {
						if k == "MODELSERVE_DATA" {
							return dir
						}
						return ""
					}
				} else {
					args = append(append([]string{}, args[:2]...), append([]string{"--data", dir}, args[2:]...)...)
				}
				err := run(context.Background(), args, env, strings.NewReader(tc.stdin), io.Discard, io.Discard)
				if err == nil || !strings.Contains(err.Error(), "there is no modelserve database in "+dir) ||
					!strings.Contains(err.Error(), "modelserve init --data "+dir) {
					t.Fatalf("%s: got %v, want a sentence naming %s and init", how, err, dir)
				}
				if _, err := os.Stat(filepath.Join(dir, "modelserve.db")); err == nil {
					t.Fatalf("%s: a database was made in %s", how, dir)
				}
			}
		})
	}
}

package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"modelserve/internal/store"
)

// dataFlags parses the flags of a command that works on the data directory
// (token, user, session, keys): --data, else MODELSERVE_DATA, else ./data,
// as serve reads it. The folder must hold a database (openExisting).
// extra, when given, defines a command's own flags before the parse.
func dataFlags(name string, args []string, getenv func(string) string, stderr io.Writer, usage string, extra ...func(*flag.FlagSet)) (*flag.FlagSet, string, error) {
	fs := newFlagSet(name)
	data := fs.String("data", or(getenv("MODELSERVE_DATA"), "./data"), "data directory (env MODELSERVE_DATA)")
	for _, define := range extra {
		define(fs)
	}
	err := parseFlags(fs, args, stderr, usage)
	return fs, *data, err
}

// openData opens the database in the data directory, creating the
// directory on first use. The directory is private (0700; see
// privateDir): it holds the database and the session key file.
func openData(ctx context.Context, dir string) (*sql.DB, error) {
	if err := privateDir(dir); err != nil {
		return nil, err
	}
	return store.Open(ctx, filepath.Join(dir, "modelserve.db"))
}

// openExisting opens the database of a data directory the server has
// already made, for the commands that work on it (token, user, session,
// keys). It never makes one: a command run from another folder would
// otherwise make a fresh ./data, and a token there that the server, which
// reads its own folder, answers 401.
func openExisting(ctx context.Context, dir string) (*sql.DB, error) {
	file := filepath.Join(dir, "modelserve.db")
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
		where := dir
		if abs, err := filepath.Abs(dir); err == nil && abs != dir {
			where = dir + " (" + abs + ")"
		}
		return nil, fmt.Errorf("there is no modelserve database in %s: give --data (or MODELSERVE_DATA) the folder the server runs with, "+
			"or make one there with modelserve init --data %s", where, dir)
	} else if err != nil {
		return nil, fmt.Errorf("cannot read the data directory %s: %w", dir, err)
	}
	return store.Open(ctx, file)
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// absDir is dir as an absolute path, for sentences and commands that must
// work from any folder; dir as it is when it cannot be made one.
func absDir(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return dir
}

package main

import (
	"context"
	"database/sql"
	"flag"
	"io"
	"path/filepath"

	"modelserve/internal/store"
)

// dataFlags parses the flags of a command that works on the data directory
// (token, user): --data, else MODELSERVE_DATA, else ./data, as serve reads it.
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

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

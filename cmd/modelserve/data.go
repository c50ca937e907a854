package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"modelserve/internal/store"
)

// dataFlags parses the flags of a command that works on the data directory
// (token, user): --data, else MODELSERVE_DATA, else ./data, as serve reads it.
func dataFlags(name string, args []string, getenv func(string) string, stderr io.Writer, usage string) (*flag.FlagSet, string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", or(getenv("MODELSERVE_DATA"), "./data"), "data directory (env MODELSERVE_DATA)")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage, "\nFlags:\n")
		fs.PrintDefaults()
	}
	err := fs.Parse(args)
	return fs, *data, err
}

// openData opens the database in the data directory, creating the
// directory on first use.
func openData(ctx context.Context, dir string) (*sql.DB, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create the data directory %s: %w", dir, err)
	}
	return store.Open(ctx, filepath.Join(dir, "modelserve.db"))
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

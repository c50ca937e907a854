package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// initCmd runs `modelserve init`: the data directory and its database, made
// before the server's first start, for users and tokens added ahead of it.
// The other data commands never make one (openExisting).
func initCmd(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	flags, data, err := dataFlags("modelserve init", args, getenv, stderr,
		"Usage: modelserve init [--data DIR]\n\n"+
			"Makes the data directory and its database, as the server's first start does, so that\n"+
			"users and tokens can be added before it. A directory that has one is left as it is.\n")
	if err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return usageError{errors.New("init takes no arguments, only --data")}
	}
	if _, err := os.Stat(filepath.Join(data, "modelserve.db")); err == nil {
		fmt.Fprintf(stderr, "%s holds a modelserve database already; nothing changed\n", absDir(data))
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cannot read the data directory %s: %w", data, err)
	}
	db, err := openData(ctx, data)
	if err != nil {
		return err
	}
	if err := db.Close(); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "made a modelserve database in %s; serve it with --data %s\n", absDir(data), data)
	return nil
}

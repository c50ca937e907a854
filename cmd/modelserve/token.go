package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"modelserve/internal/auth"
)

// tokenCmd runs `modelserve token create|list|revoke`, against the database
// in the data directory, with or without the server running (SQLite's WAL
// lets both write).
func tokenCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("token needs a command: create NAME, list, or revoke NAME")
	}
	sub, args := args[0], args[1:]
	fs, data, err := dataFlags("modelserve token "+sub, args, getenv, stderr,
		"Usage: modelserve token create|list|revoke [--data DIR] [NAME]\n\n"+
			"API tokens for scripts: send one as Authorization: Bearer <token>.\n"+
			"create prints a new token once; only its hash is kept.\n")
	if err != nil {
		return err
	}
	db, err := openData(ctx, data)
	if err != nil {
		return err
	}
	defer db.Close()
	toks := auth.NewTokens(db)

	name := func() (string, error) {
		if fs.NArg() != 1 {
			return "", fmt.Errorf("token %s takes one name", sub)
		}
		return fs.Arg(0), nil
	}
	switch sub {
	case "create":
		n, err := name()
		if err != nil {
			return err
		}
		tok, err := toks.Create(ctx, n)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, tok)
		fmt.Fprintf(stderr, "token %q created; it is shown only this once\n", n)
		return nil
	case "list":
		list, err := toks.List(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tCREATED\tLAST USED")
		for _, t := range list {
			used := "never"
			if !t.LastUsed.IsZero() {
				used = t.LastUsed.Local().Format(time.DateTime)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, t.Created.Local().Format(time.DateTime), used)
		}
		return tw.Flush()
	case "revoke":
		n, err := name()
		if err != nil {
			return err
		}
		if err := toks.Revoke(ctx, n); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "token %q revoked\n", n)
		return nil
	default:
		return fmt.Errorf("%q is not a token command; use create, list or revoke", sub)
	}
}

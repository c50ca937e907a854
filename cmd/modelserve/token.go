package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
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
	var models, scope string
	var out *output
	fs, data, err := dataFlags("modelserve token "+sub, args, getenv, stderr,
		"Usage: modelserve token create [--models a,b] [--scope all|gateway] [--data DIR] NAME\n"+
			"       modelserve token list [--data DIR] [-o json]\n"+
			"       modelserve token revoke [--data DIR] NAME\n\n"+
			"API tokens for scripts and OpenAI clients: send one as Authorization: Bearer <token>.\n"+
			"create prints a new token once; only its hash is kept. A token reaches the API\n"+
			"(/api/v1/) and the gateway (/v1/) unless --scope gateway or --models limit it.\n",
		func(fs *flag.FlagSet) {
			if sub == "list" {
				out = outputFlag(fs)
			}
			if sub != "create" {
				return
			}
			fs.StringVar(&models, "models", "", "comma-separated catalog models or aliases the token may call through the gateway (implies --scope gateway); none: every model")
			fs.StringVar(&scope, "scope", "", "all: the API and the gateway; gateway: /v1/ only")
		})
	if err != nil {
		return err
	}
	db, err := openExisting(ctx, data)
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
		lim := auth.Limits{Scope: scope}
		for _, m := range strings.Split(models, ",") {
			if m = strings.TrimSpace(m); m != "" {
				lim.Models = append(lim.Models, m)
			}
		}
		tok, err := toks.CreateLimited(ctx, n, lim)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, tok)
		fmt.Fprintf(stderr, "token %q created; it is shown only this once\n", n)
		return nil
	case "list":
		if err := out.check(); err != nil {
			return err
		}
		list, err := toks.List(ctx)
		if err != nil {
			return err
		}
		if list == nil {
			list = []auth.TokenInfo{}
		}
		return out.print(stdout, list, "NAME\tSCOPE\tMODELS\tCREATED\tLAST USED", func(tw io.Writer) {
			for _, t := range list {
				used := "never"
				if !t.LastUsed.IsZero() {
					used = t.LastUsed.Local().Format(time.DateTime)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, t.Scope, or(strings.Join(t.Models, ","), "all"),
					t.Created.Local().Format(time.DateTime), used)
			}
		})
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

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"modelserve/internal/auth"
	"modelserve/internal/words"
)

// sessionCmd runs `modelserve session list|revoke`: who is signed in to
// the console, and ending a session from outside it (a laptop lost, a
// cookie seen in a screenshot). It works with the server running: a
// session revoked here is refused on its next request.
func sessionCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("session needs a command: list [NAME], or revoke ID|--user NAME")
	}
	sub, args := args[0], args[1:]
	var user string
	var out *output
	fs, data, err := dataFlags("modelserve session "+sub, args, getenv, stderr,
		"Usage: modelserve session list [--data DIR] [-o json] [NAME]\n"+
			"       modelserve session revoke [--data DIR] ID | --user NAME\n\n"+
			"Console sessions. list shows who is signed in, from where, and until when;\n"+
			"revoke ends one session by its ID, or every session of a user.\n",
		func(fs *flag.FlagSet) {
			if sub == "revoke" {
				fs.StringVar(&user, "user", "", "end every session of this user")
			}
			if sub == "list" {
				out = outputFlag(fs)
			}
		})
	if err != nil {
		return err
	}
	switch sub {
	case "list":
		if fs.NArg() > 1 {
			return fmt.Errorf("session list takes at most one user name")
		}
		if err := out.check(); err != nil {
			return err
		}
	case "revoke":
		if (user == "") == (fs.NArg() != 1) {
			return fmt.Errorf("session revoke takes one session ID, or --user NAME: modelserve session list shows the IDs")
		}
	default:
		return fmt.Errorf("%q is not a session command; use list or revoke", sub)
	}
	db, err := openExisting(ctx, data)
	if err != nil {
		return err
	}
	defer db.Close()
	sessions := auth.NewSessions(db)

	switch {
	case sub == "list":
		list, err := sessions.List(ctx, fs.Arg(0))
		if err != nil {
			return err
		}
		if list == nil {
			list = []auth.Session{}
		}
		return out.print(stdout, list, "ID\tUSER\tSIGNED IN\tLAST SEEN\tEXPIRES\tADDRESS\tBROWSER", func(tw io.Writer) {
			for _, s := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.User, when(s.Created), when(s.LastSeen), when(s.Expires),
					or(s.Address, "-"), or(s.UserAgent, "-"))
			}
		})
	case user != "":
		n, err := sessions.RevokeUser(ctx, user)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "%s of %s ended\n", words.Count(n, "session", "sessions"), user)
	default:
		if err := sessions.Revoke(ctx, fs.Arg(0)); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "session %s ended\n", fs.Arg(0))
	}
	return nil
}

// keysCmd runs `modelserve keys rotate`: new keys for the session cookie,
// and every session ended, so that whoever may have read the old keys, or
// holds a cookie, is out.
func keysCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "rotate" {
		return fmt.Errorf("keys needs a command: rotate")
	}
	fs, data, err := dataFlags("modelserve keys rotate", args[1:], getenv, stderr,
		"Usage: modelserve keys rotate [--data DIR]\n\n"+
			"Makes new keys for the console's session cookie in DIR/"+auth.KeyFileName+" and ends every\n"+
			"session: everyone signs in again. A running server uses the new keys from its\n"+
			"next start; the sessions end at once.\n")
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("keys rotate takes no arguments, only --data")
	}
	if getenv("MODELSERVE_SESSION_SECRET") != "" {
		return fmt.Errorf("the session keys come from MODELSERVE_SESSION_SECRET, not a key file: give the server a new secret and restart it to rotate them")
	}
	db, err := openExisting(ctx, data)
	if err != nil {
		return err
	}
	defer db.Close()
	file := filepath.Join(data, auth.KeyFileName)
	if err := auth.RotateKeyFile(file); err != nil {
		return err
	}
	n, err := auth.NewSessions(db).RevokeAll(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "new session keys in %s; %s ended, so everyone signs in again (a running server uses the new keys from its next start)\n",
		file, words.Count(n, "session", "sessions"))
	return nil
}

func when(t time.Time) string { return t.Local().Format(time.DateTime) }

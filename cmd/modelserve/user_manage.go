package main

import (
	"context"
	"fmt"
	"io"

	"modelserve/internal/auth"
	"modelserve/internal/words"
)

// userPasswd gives a user a new password, from the first line of standard
// input or generated and printed once, and ends every session they have:
// a password is changed because it may be known, and whoever knew it may
// be signed in.
func userPasswd(ctx context.Context, users *auth.Users, name string, stdin io.Reader, stdout, stderr io.Writer) error {
	password, generated, err := readPassword(stdin, stderr, "new password for "+name)
	if err != nil {
		return err
	}
	n, err := users.SetPassword(ctx, name, password)
	if err != nil {
		return err
	}
	if generated {
		fmt.Fprintln(stdout, password)
	}
	fmt.Fprintf(stderr, "password of %q changed; %s ended", name, words.Count(n, "session", "sessions"))
	if generated {
		fmt.Fprint(stderr, "; the password above is shown only this once")
	}
	fmt.Fprintln(stderr)
	return nil
}

// userRemove removes a user; whoever is signed in as them is out at once.
func userRemove(ctx context.Context, users *auth.Users, name string, stderr io.Writer) error {
	n, err := users.Remove(ctx, name)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "user %q removed; %s ended\n", name, words.Count(n, "session", "sessions"))
	return nil
}

package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"modelserve/internal/auth"
)

// userCmd runs `modelserve user add|list|passwd|remove`: the people who
// sign in to the console. A password comes from the first line of standard input, so that
// it never appears in a process list or a shell history; with none given,
// one is generated and printed once.
func userCmd(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("user needs a command: add NAME, passwd NAME, remove NAME, or list")
	}
	sub, args := args[0], args[1:]
	var out *output
	fs, data, err := dataFlags("modelserve user "+sub, args, getenv, stderr,
		"Usage: modelserve user add|passwd|remove [--data DIR] NAME | user list [--data DIR] [-o json]\n\n"+
			"Console users. add and passwd read the password from the first line of standard\n"+
			"input; with none, they generate one and print it once. Only a bcrypt hash is kept.\n"+
			"passwd and remove end every session of the user.\n",
		func(fs *flag.FlagSet) {
			if sub == "list" {
				out = outputFlag(fs)
			}
		})
	if err != nil {
		return err
	}
	if out != nil {
		if err := out.check(); err != nil {
			return err
		}
	}
	switch sub {
	case "add", "list", "passwd", "remove":
	default:
		return fmt.Errorf("%q is not a user command; use add, list, passwd or remove", sub)
	}
	if sub != "list" && fs.NArg() != 1 {
		return fmt.Errorf("user %s takes one name: modelserve user %s NAME", sub, sub)
	}
	db, err := openExisting(ctx, data)
	if err != nil {
		return err
	}
	defer db.Close()
	users := auth.NewUsers(db)

	switch sub {
	case "passwd":
		return userPasswd(ctx, users, fs.Arg(0), stdin, stdout, stderr)
	case "remove":
		return userRemove(ctx, users, fs.Arg(0), stderr)
	}
	if sub == "list" {
		list, err := users.List(ctx)
		if err != nil {
			return err
		}
		if list == nil {
			list = []auth.UserInfo{}
		}
		return out.print(stdout, list, "NAME\tCREATED", func(tw io.Writer) {
			for _, u := range list {
				fmt.Fprintf(tw, "%s\t%s\n", u.Name, u.Created.Local().Format(time.DateTime))
			}
		})
	}

	name := fs.Arg(0)
	password, generated, err := readPassword(stdin, stderr, "password for "+name)
	if err != nil {
		return err
	}
	if err := users.Add(ctx, name, password); err != nil {
		return err
	}
	if generated {
		fmt.Fprintln(stdout, password)
		fmt.Fprintf(stderr, "user %q added; the password above is shown only this once\n", name)
		return nil
	}
	fmt.Fprintf(stderr, "user %q added\n", name)
	return nil
}

// readPassword reads a password from the first line of stdin, asking with
// prompt when stdin is a terminal; an empty line makes one, and generated
// says so (it is then printed once).
func readPassword(stdin io.Reader, stderr io.Writer, prompt string) (password string, generated bool, err error) {
	if isTerminal(stdin) {
		fmt.Fprintf(stderr, "%s (empty to generate one): ", prompt)
	}
	if password, err = firstLine(stdin); err != nil {
		return "", false, fmt.Errorf("read the password from standard input: %w", err)
	}
	if password == "" {
		return auth.GeneratePassword(), true, nil
	}
	return password, false, nil
}

// firstLine is the first line of r without its line ending; "" when r is
// empty or nil.
func firstLine(r io.Reader) (string, error) {
	if r == nil {
		return "", nil
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// isTerminal is whether r is a terminal, where a person types the password
// and should be asked for it.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

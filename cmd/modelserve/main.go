// Command modelserve takes a language model from a registry repository to a
// serving replica, as one job an operator can watch from a browser console or
// drive from scripts.
//
// It reads its settings from flags, then from the environment, opens its
// SQLite state in the data directory, and serves until SIGINT or SIGTERM, when
// it waits for its work to stop and closes the database.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	var usage usageError
	if errors.As(err, &usage) {
		fmt.Fprintln(os.Stderr, "modelserve:", err)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "modelserve:", err)
		os.Exit(1)
	}
}

// run is main without the process: tests call it with their own arguments,
// environment and context.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	if cmd == "serve" && len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		cmd, args = "version", args[1:]
	}
	switch cmd {
	case "serve":
		cfg, err := parseServe(args, getenv, stderr)
		if err != nil {
			return err
		}
		log, err := newLogger(stderr, cfg.LogFormat, cfg.LogLevel)
		if err != nil {
			return err
		}
		return serve(ctx, cfg, log, nil)
	case "version":
		return versionCmd(ctx, args, getenv, stdout, stderr)
	case "init":
		return initCmd(ctx, args, getenv, stderr)
	case "token":
		return tokenCmd(ctx, args, getenv, stdout, stderr)
	case "user":
		return userCmd(ctx, args, getenv, stdin, stdout, stderr)
	case "session":
		return sessionCmd(ctx, args, getenv, stdout, stderr)
	case "keys":
		return keysCmd(ctx, args, getenv, stdout, stderr)
	case "model":
		return modelCmd(ctx, args, getenv, stdout, stderr)
	case "chat":
		return chatCmd(ctx, args, getenv, stdin, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return usageError{fmt.Errorf("%q is not a command; the commands are serve, model, chat, init, token, user, session, keys, version and help", cmd)}
	}
}

const usage = `modelserve takes a language model from a registry repository to a serving replica.

Usage:
  modelserve [serve] [flags]   run the server (the default)
  modelserve init              make the data directory's database before the first start
                               (the commands below refuse a folder without one)
  modelserve token create NAME  print a new API token (once); also token list, token revoke NAME
  modelserve user add NAME     add a console user, password from stdin or generated; also user list,
                               user passwd NAME, user remove NAME (both end the user's sessions)
  modelserve session list [NAME]  console sessions; session revoke ID|--user NAME ends them
  modelserve keys rotate       new session cookie keys; everyone signs in again
  modelserve model plan|serve|list  against a running server (MODELSERVE_URL, MODELSERVE_TOKEN):
                               where a repository's files fit, serve one (--wait follows the job), the catalog
  modelserve chat MODEL [MESSAGE]  talk with a served model, the reply streamed
  modelserve version           modelserve's version and commit, Go's, and the engine build it finds
                               (also modelserve --version)
  modelserve help              this text

Run "modelserve serve --help" for the server's flags.
`

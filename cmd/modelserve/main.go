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
	"strings"
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
// environment and context. The first argument names the command (the
// table in commands.go); with none, or a flag first, it is serve.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	name := "serve"
	if len(args) > 0 {
		switch args[0] {
		case "--help", "-help", "-h":
			fmt.Fprint(stdout, usage())
			return flag.ErrHelp
		case "--version", "-version":
			name, args = "version", args[1:]
		default:
			if args[0] != "" && args[0][0] != '-' {
				name, args = args[0], args[1:]
			}
		}
	}
	cmd, ok := lookup(name)
	if !ok {
		fmt.Fprint(stderr, usage())
		return usageError{fmt.Errorf("%q is not a command; the commands are %s", name, strings.Join(commandNames(), ", "))}
	}
	return cmd.run(ctx, call{args: args, getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr})
}

// serveCmd runs the server.
func serveCmd(ctx context.Context, c call) error {
	cfg, err := parseServe(c.args, c.getenv, c.stderr)
	if err != nil {
		return err
	}
	if cfg.Upgrade {
		return upgradeRunning(ctx, cfg.Data, c.stdout)
	}
	log, err := newLogger(c.stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	// SIGHUP hands the port to the binary on disk (handover.go).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	cfg.HandOver = hup
	return serve(ctx, cfg, log, nil)
}

package main

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// call is one command line as a command runs it: its arguments after the
// command's name, and the process's environment and streams.
type call struct {
	args           []string
	getenv         func(string) string
	stdin          io.Reader
	stdout, stderr io.Writer
}

// command is one of modelserve's commands. The table of them (commands)
// is the one list: the help is written from it, run dispatches by it and
// the shell completions are generated from it, so none of the three can
// name a command another lacks.
type command struct {
	name string
	// subs are its subcommands, for the help and the completions; its run
	// reads them from its arguments.
	subs []string
	// synopsis is what follows its name in the help; summary says what it
	// does, in a line.
	synopsis, summary string
	group             string
	run               func(ctx context.Context, c call) error
}

// The groups of the help, in its order.
const (
	groupServer = "The server"
	groupClient = "Against a running server (--url or MODELSERVE_URL, --token or MODELSERVE_TOKEN)"
	groupData   = "On the server's data directory (--data or MODELSERVE_DATA)"
	groupOther  = "Other"
)

var groups = []string{groupServer, groupClient, groupData, groupOther}

// commands is every command, in the help's order within its group. It is
// filled in by init: help and completion read the table they are in.
var commands []command

func init() {
	commands = []command{
		{name: "serve", synopsis: "[flags]", group: groupServer,
			summary: "run the server (the default with no command); modelserve serve --help lists its flags",
			run: func(ctx context.Context, c call) error {
				return serveCmd(ctx, c)
			}},
		{name: "init", synopsis: "[--data DIR]", group: groupServer,
			summary: "make the data directory's database before the first start",
			run:     func(ctx context.Context, c call) error { return initCmd(ctx, c.args, c.getenv, c.stderr) }},

		{name: "model", subs: []string{"plan", "serve", "list"}, synopsis: "plan|serve|list", group: groupClient,
			summary: "where a repository's files fit, serve one (--wait follows its job), the catalog",
			run:     func(ctx context.Context, c call) error { return modelCmd(ctx, c.args, c.getenv, c.stdout, c.stderr) }},
		{name: "ps", group: groupClient,
			summary: "the replicas running: model, state, node, memory, since",
			run:     psCmd},
		{name: "logs", synopsis: "REPLICA [-f]", group: groupClient,
			summary: "a replica's engine log; -f follows it until the replica stops",
			run:     logsCmd},
		{name: "stop", synopsis: "MODEL", group: groupClient,
			summary: "stop a model's replicas; it starts again on its next request",
			run:     stopCmd},
		{name: "rm", synopsis: "MODEL", group: groupClient,
			summary: "remove a model from the catalog (its files stay on the mirror)",
			run:     rmCmd},
		{name: "update", synopsis: "MODEL", group: groupClient,
			summary: "try a model's new weights beside it (--check asks its repository first)",
			run:     updateCmd},
		{name: "job", subs: []string{"list", "watch"}, synopsis: "list|watch", group: groupClient,
			summary: "the jobs, newest first; watch follows one to its end",
			run:     jobCmd},
		{name: "chat", synopsis: "MODEL [MESSAGE]", group: groupClient,
			summary: "talk with a served model, the reply streamed",
			run: func(ctx context.Context, c call) error {
				return chatCmd(ctx, c.args, c.getenv, c.stdin, c.stdout, c.stderr)
			}},

		{name: "token", subs: []string{"create", "list", "revoke"}, synopsis: "create|list|revoke", group: groupData,
			summary: "API tokens: create prints a new one once",
			run:     func(ctx context.Context, c call) error { return tokenCmd(ctx, c.args, c.getenv, c.stdout, c.stderr) }},
		{name: "user", subs: []string{"add", "list", "passwd", "remove"}, synopsis: "add|list|passwd|remove", group: groupData,
			summary: "console users; the password from standard input, or generated",
			run: func(ctx context.Context, c call) error {
				return userCmd(ctx, c.args, c.getenv, c.stdin, c.stdout, c.stderr)
			}},
		{name: "session", subs: []string{"list", "revoke"}, synopsis: "list|revoke", group: groupData,
			summary: "console sessions, and ending them",
			run:     func(ctx context.Context, c call) error { return sessionCmd(ctx, c.args, c.getenv, c.stdout, c.stderr) }},
		{name: "keys", subs: []string{"rotate"}, synopsis: "rotate", group: groupData,
			summary: "new session cookie keys; everyone signs in again",
			run:     func(ctx context.Context, c call) error { return keysCmd(ctx, c.args, c.getenv, c.stdout, c.stderr) }},

		{name: "version", group: groupOther,
			summary: "modelserve's version and commit, Go's, and the engine build it finds (also --version)",
			run:     func(ctx context.Context, c call) error { return versionCmd(ctx, c.args, c.getenv, c.stdout, c.stderr) }},
		{name: "completion", subs: completionShells, synopsis: "bash|zsh|fish", group: groupOther,
			summary: "a shell's completion script for these commands",
			run:     completionCmd},
		{name: "help", group: groupOther,
			summary: "this text",
			run: func(_ context.Context, c call) error {
				fmt.Fprint(c.stdout, usage())
				return nil
			}},
	}
}

// lookup is the command called name.
func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// commandNames are the commands' names, in the table's order.
func commandNames() []string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	return names
}

// usage is modelserve's help: every command of the table, by group.
func usage() string {
	var b strings.Builder
	b.WriteString("modelserve takes a language model from a registry repository to a serving replica.\n\n")
	b.WriteString("Usage: modelserve COMMAND [arguments] [flags]   (flags go before or after the arguments)\n")
	width := 0
	for _, c := range commands {
		width = max(width, len(c.name)+1+len(c.synopsis))
	}
	for _, g := range groups {
		fmt.Fprintf(&b, "\n%s:\n", g)
		for _, c := range commands {
			if c.group == g {
				fmt.Fprintf(&b, "  %-*s  %s\n", width, strings.TrimSpace(c.name+" "+c.synopsis), c.summary)
			}
		}
	}
	b.WriteString("\nRun \"modelserve COMMAND --help\" for a command's flags; --output json (-o json) prints a listing for scripts.\n")
	return b.String()
}

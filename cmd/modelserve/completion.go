package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"modelserve/internal/operr"
)

// completionShells are the shells modelserve writes a completion for.
var completionShells = []string{"bash", "zsh", "fish"}

// completionCmd runs `modelserve completion bash|zsh|fish`: a script,
// written from the command table, that completes the commands and their
// subcommands. Loaded as each shell loads one:
//
//	source <(modelserve completion bash)
//	modelserve completion zsh > "${fpath[1]}/_modelserve"
//	modelserve completion fish > ~/.config/fish/completions/modelserve.fish
func completionCmd(_ context.Context, c call) error {
	if len(c.args) == 1 && (c.args[0] == "--help" || c.args[0] == "-h") {
		fmt.Fprint(c.stderr, "Usage: modelserve completion bash|zsh|fish\n\n"+
			"Prints a shell's completion script for modelserve's commands. Load it with\n"+
			"  source <(modelserve completion bash)\n"+
			"  modelserve completion zsh > \"${fpath[1]}/_modelserve\"\n"+
			"  modelserve completion fish > ~/.config/fish/completions/modelserve.fish\n")
		return flag.ErrHelp
	}
	if len(c.args) != 1 {
		return usageError{errors.New("completion takes a shell: modelserve completion bash, zsh or fish")}
	}
	var script string
	switch c.args[0] {
	case "bash":
		script = bashCompletion()
	case "zsh":
		script = zshCompletion()
	case "fish":
		script = fishCompletion()
	default:
		return usageError{fmt.Errorf("%s is not a shell modelserve completes; use bash, zsh or fish", operr.Quote(c.args[0]))}
	}
	_, err := fmt.Fprint(c.stdout, script)
	return err
}

func bashCompletion() string {
	var b strings.Builder
	b.WriteString("# modelserve completion for bash: source <(modelserve completion bash)\n")
	b.WriteString("_modelserve() {\n\tlocal cur=${COMP_WORDS[COMP_CWORD]}\n")
	fmt.Fprintf(&b, "\tif [ \"$COMP_CWORD\" -eq 1 ]; then\n\t\tCOMPREPLY=($(compgen -W %q -- \"$cur\"))\n\t\treturn\n\tfi\n", strings.Join(commandNames(), " "))
	b.WriteString("\tif [ \"$COMP_CWORD\" -eq 2 ]; then\n\t\tcase ${COMP_WORDS[1]} in\n")
	for _, c := range commands {
		if len(c.subs) > 0 {
			fmt.Fprintf(&b, "\t\t%s) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", c.name, strings.Join(c.subs, " "))
		}
	}
	b.WriteString("\t\tesac\n\tfi\n}\ncomplete -o default -F _modelserve modelserve\n")
	return b.String()
}

func zshCompletion() string {
	var b strings.Builder
	b.WriteString("#compdef modelserve\n# modelserve completion for zsh: modelserve completion zsh > \"${fpath[1]}/_modelserve\"\n")
	b.WriteString("_modelserve() {\n\tif (( CURRENT == 2 )); then\n\t\tlocal -a cmds\n\t\tcmds=(\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "\t\t\t%s\n", zshQuote(c.name+":"+c.summary))
	}
	b.WriteString("\t\t)\n\t\t_describe command cmds\n\t\treturn\n\tfi\n\tif (( CURRENT == 3 )); then\n\t\tcase ${words[2]} in\n")
	for _, c := range commands {
		if len(c.subs) > 0 {
			fmt.Fprintf(&b, "\t\t%s) compadd %s ;;\n", c.name, strings.Join(c.subs, " "))
		}
	}
	// Autoloaded from fpath, the file is the function's body; sourced, it
	// registers the function.
	b.WriteString("\t\tesac\n\tfi\n}\nif [ \"$funcstack[1]\" = \"_modelserve\" ]; then\n\t_modelserve \"$@\"\nelse\n\tcompdef _modelserve modelserve\nfi\n")
	return b.String()
}

func fishCompletion() string {
	var b strings.Builder
	b.WriteString("# modelserve completion for fish: modelserve completion fish > ~/.config/fish/completions/modelserve.fish\n")
	b.WriteString("complete -c modelserve -f\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "complete -c modelserve -n __fish_use_subcommand -a %s -d %s\n", c.name, fishQuote(c.summary))
	}
	for _, c := range commands {
		for _, sub := range c.subs {
			fmt.Fprintf(&b, "complete -c modelserve -n '__fish_seen_subcommand_from %s' -a %s\n", c.name, sub)
		}
	}
	return b.String()
}

// zshQuote and fishQuote put a text in single quotes, for the shell to
// read as it is.
func zshQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// usageError is a command line that cannot be run as typed. main prints it
// once and exits 2, as the flag package's own ExitOnError would: a script
// can tell a mistyped flag (2) from a server that failed (1).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// newFlagSet is a flag set that prints nothing by itself: parseFlags
// prints the help when asked, and main prints an error once.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args into fs, flags before, between and after the
// arguments as kubectl and ollama take them (`model serve acme/x --wait`);
// after "--" everything is an argument. fs.Args() are then the arguments
// alone, in their order. --help prints usage and the flags to help and
// returns flag.ErrHelp (main exits 0 quietly); a flag that does not parse
// is a usageError naming it as the README writes flags.
func parseFlags(fs *flag.FlagSet, args []string, help io.Writer, usage string) error {
	var positional []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(help, usage, "\nFlags:\n")
			printFlags(help, fs)
			return err
		}
		if err != nil {
			return usageError{fmt.Errorf("%s; %s --help lists the flags", dashes(err.Error()), fs.Name())}
		}
		rest := fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		positional, args = append(positional, rest[0]), rest[1:]
	}
	// A parse of "--" alone leaves fs.Args() the arguments, and every
	// flag as set.
	return fs.Parse(append([]string{"--"}, positional...))
}

// printFlags lists fs's flags as the README writes them: "--name value",
// then the help, then the default when there is one.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		kind, help := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if kind != "" {
			line += " " + kind
		}
		fmt.Fprintln(w, line)
		fmt.Fprintf(w, "    \t%s", strings.ReplaceAll(help, "\n", "\n    \t"))
		if f.DefValue != "" && f.DefValue != "false" {
			fmt.Fprintf(w, " (default %q)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

// dashes writes the flag package's "-name" as "--name", the way help and
// the README write flags.
func dashes(msg string) string {
	for _, p := range []string{"not defined: -", "argument: -", "for flag -"} {
		msg = strings.Replace(msg, p, p+"-", 1)
	}
	return msg
}

package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
)

// output is how a listing prints: a table for people (the default), or
// JSON for scripts (--output json, -o json), as kubectl's -o does.
type output struct{ format string }

// outputFlag defines --output and its short -o on fs.
func outputFlag(fs *flag.FlagSet) *output {
	o := &output{}
	const help = "table (the default) or json, for scripts"
	fs.StringVar(&o.format, "output", "", help)
	fs.StringVar(&o.format, "o", "", "short for --output")
	return o
}

// check refuses a format there is none of, before anything is asked of a
// server.
func (o *output) check() error {
	switch o.format {
	case "", "table", "json":
		return nil
	}
	return usageError{fmt.Errorf("--output is table or json, not %q", o.format)}
}

// print writes v as indented JSON with --output json; else the table,
// its header a tab-separated line and each of its rows written by rows.
func (o *output) print(w io.Writer, v any, header string, rows func(tw io.Writer)) error {
	if o.format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	rows(tw)
	return tw.Flush()
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/hf"
	"modelserve/internal/operr"
	"modelserve/internal/plan"
	"modelserve/internal/words"
	"modelserve/jobs"
)

const modelUsage = `Usage: modelserve model plan OWNER/NAME [--context N]
       modelserve model serve OWNER/NAME [--quant Q] [--name N] [--context N] [--replicas N] [--wait]
       modelserve model list [-o json]

Against a running server (--url or MODELSERVE_URL, --token or MODELSERVE_TOKEN):
plan shows where each file of a repository fits and the one served when none is named;
serve starts the job that serves it and prints its ID, or with --wait follows its steps
as they happen and exits 1 when the job fails; list shows the catalog, each model's
state, replicas ready of wanted, and the commit it runs. --context is the tokens of one
request in both plan and serve: the engine holds that many for each of its slots.
`

// modelCmd runs `modelserve model plan|serve|list`.
func modelCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{errors.New("model needs a command: plan OWNER/NAME, serve OWNER/NAME, or list")}
	}
	sub, args := args[0], args[1:]
	var quant, name string
	var tokens, replicas int
	var wait bool
	var out *output
	fs, c, err := clientFlags("modelserve model "+sub, args, getenv, stderr, modelUsage, func(fs *flag.FlagSet) {
		switch sub {
		case "plan":
			fs.IntVar(&tokens, "context", 0, "tokens of context per request, as serve's --context; 0: the plan's choice")
		case "serve":
			fs.StringVar(&quant, "quant", "", "the quantisation to serve (Q4_K_M, ...); none: the plan's choice")
			fs.StringVar(&name, "name", "", "the catalog name; none: one made from the repository's")
			fs.IntVar(&tokens, "context", 0, "tokens of context per request; 0: the plan's choice")
			fs.IntVar(&replicas, "replicas", 1, "replicas to keep running; 0 starts one on the first request")
			fs.BoolVar(&wait, "wait", false, "follow the job's steps until it ends; exit 1 when it fails")
		case "list":
			out = outputFlag(fs)
		}
	})
	if err != nil {
		return err
	}
	switch sub {
	case "plan", "serve":
		if fs.NArg() != 1 {
			return usageError{fmt.Errorf("model %s takes one repository: modelserve model %s OWNER/NAME", sub, sub)}
		}
		if err := hf.CheckRepoID(fs.Arg(0)); err != nil {
			return usageError{fmt.Errorf("%s is not a repository; it looks like owner/name, or local/<folder>", operr.Quote(fs.Arg(0)))}
		}
		if tokens < 0 || replicas < 0 {
			return usageError{errors.New("--context and --replicas are 0 or more")}
		}
	case "list":
		if fs.NArg() != 0 {
			return usageError{errors.New("model list takes no arguments")}
		}
		if err := out.check(); err != nil {
			return err
		}
	default:
		return usageError{fmt.Errorf("%s is not a model command; use plan, serve or list", operr.Quote(sub))}
	}
	switch sub {
	case "plan":
		return modelPlan(ctx, c, fs.Arg(0), tokens, stdout)
	case "list":
		return modelList(ctx, c, out, stdout)
	}
	req := map[string]any{"repo": fs.Arg(0), "replicas": replicas}
	if quant != "" {
		req["quant"] = quant
	}
	if name != "" {
		req["name"] = name
	}
	if tokens > 0 {
		req["context_length"] = tokens
	}
	var job jobs.Job
	if err := c.do(ctx, "POST", "/api/v1/serve", req, &job); err != nil {
		return err
	}
	return startedJob(ctx, c, job, wait, stdout, stderr)
}

// modelPlan prints where each of a repository's files fits.
func modelPlan(ctx context.Context, c *client, repo string, tokens int, stdout io.Writer) error {
	path := "/api/v1/repos/" + repo
	if tokens > 0 {
		path += "?context_length=" + strconv.Itoa(tokens)
	}
	var rep plan.Report
	if err := c.do(ctx, "GET", path, nil, &rep); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s at %s\n", rep.Repo, or(rep.Commit, rep.Revision))
	if rep.Plan.Choice != nil {
		ch := rep.Plan.Choice
		fmt.Fprintf(stdout, "serves %s: %s\n", or(ch.Quant, ch.Artifact), rep.Plan.Reason)
	} else if rep.Plan.Reason != "" {
		fmt.Fprintf(stdout, "serves nothing: %s\n", rep.Plan.Reason)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FILE\tSIZE\tWHERE\tNEEDS\tCONTEXT×SLOTS\tTOKENS/S\tFIT")
	for _, set := range rep.Sets {
		mark := ""
		if set.Recommended {
			mark = " *"
		}
		if len(set.Options) == 0 {
			fmt.Fprintf(tw, "%s%s\t%s\t-\t-\t-\t-\t%s\n", set.Name, mark, words.Size(set.Bytes), or(set.Note, "not planned"))
			continue
		}
		for i, o := range set.Options {
			file, size := set.Name+mark, words.Size(set.Bytes)
			if i > 0 {
				file, size = "", ""
			}
			where := "CPU"
			if !o.CPU {
				where = fmt.Sprintf("%d× %s", max(o.GPUsPerNode, 1), or(o.Class, "GPU"))
				if o.Nodes > 1 {
					where += fmt.Sprintf(" on %d nodes", o.Nodes)
				}
			}
			tps := "-"
			if o.TokensPerSecond > 0 {
				tps = strconv.FormatFloat(o.TokensPerSecond, 'f', 0, 64)
			}
			fit := o.Fit
			if o.Why != "" {
				fit += ": " + o.Why
			}
			// The tokens of a request, as --context gives them, and the
			// requests at once that the pool holds.
			context := strconv.Itoa(o.Context)
			if sz := o.Sizing.Size; sz.Sized() {
				context = fmt.Sprintf("%d×%d", sz.Context(), max(sz.Slots, 1))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", file, size, where, words.GB(o.NeedGB), context, tps, fit)
		}
	}
	return tw.Flush()
}

// listedModel is a model as model list shows it: the catalog's entry,
// and how the fleet fares with it (none without a fleet, or before the
// fleet has looked at it).
type listedModel struct {
	catalog.Model
	Health *fleet.ModelHealth `json:"health,omitempty"`
}

// modelList prints the catalog: each model's state and replicas from the
// fleet, and the commit it runs.
func modelList(ctx context.Context, c *client, out *output, stdout io.Writer) error {
	// The catalog comes in pages, each after the last name of the one
	// before: following next reads every model once.
	var listed []catalog.Model
	for path := "/api/v1/catalog?limit=500"; path != ""; {
		var page struct {
			Models []catalog.Model `json:"models"`
			Next   string          `json:"next"`
		}
		if err := c.do(ctx, "GET", path, nil, &page); err != nil {
			return err
		}
		listed, path = append(listed, page.Models...), page.Next
	}
	running, err := readReplicas(ctx, c)
	if err != nil {
		return err
	}
	health := map[string]*fleet.ModelHealth{}
	for i, h := range running.Models {
		health[h.Model] = &running.Models[i]
	}
	models := make([]listedModel, len(listed))
	for i, m := range listed {
		models[i] = listedModel{Model: m, Health: health[m.Name]}
	}
	return out.print(stdout, models, "NAME\tSTATE\tREPLICAS\tVERSION\tCONTEXT\tREPOSITORY", func(tw io.Writer) {
		for _, m := range models {
			repo, version := "-", "-"
			if m.Origin != nil {
				repo, version = m.Origin.Repo, or(hf.Short(m.Origin.Revision), "-")
			}
			if m.Canary != nil {
				version += " (on trial for " + m.Canary.Of + ")"
			}
			state, replicas := "-", "-"
			if h := m.Health; h != nil {
				state, replicas = h.Status(), fmt.Sprintf("%d/%d", h.Ready, h.Want)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", m.Name, state, replicas, version, m.ContextLength, repo)
		}
	})
}

// readSSE calls each with every event of a server-sent event stream: its
// name and its data lines joined, as EventSource reads them. A line longer
// than maxStreamLine is an error.
func readSSE(r io.Reader, each func(event string, data []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxStreamLine)
	var event string
	var data bytes.Buffer
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data.Len() > 0 {
				if err := each(or(event, "message"), bytes.TrimSuffix(data.Bytes(), []byte("\n"))); err != nil {
					return err
				}
			}
			event = ""
			data.Reset()
		case strings.HasPrefix(line, ":"):
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				event = value
			case "data":
				if data.Len()+len(value) > maxStreamLine {
					return errors.New("an event of the stream is too long")
				}
				data.WriteString(value)
				data.WriteByte('\n')
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("the event stream broke off: %w", err)
	}
	return nil
}

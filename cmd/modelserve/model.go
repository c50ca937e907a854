package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"modelserve/catalog"
	"modelserve/internal/hf"
	"modelserve/internal/operr"
	"modelserve/internal/plan"
	"modelserve/internal/words"
	"modelserve/jobs"
)

const modelUsage = `Usage: modelserve model plan [--context N] OWNER/NAME
       modelserve model serve [--quant Q] [--name N] [--context N] [--replicas N] [--wait] OWNER/NAME
       modelserve model list

Against a running server (--url or MODELSERVE_URL, --token or MODELSERVE_TOKEN):
plan shows where each file of a repository fits and the one served when none is named;
serve starts the job that serves it and prints its ID, or with --wait follows its steps
as they happen and exits 1 when the job fails; list shows the catalog.
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
	fs, c, err := clientFlags("modelserve model "+sub, args, getenv, stderr, modelUsage, func(fs *flag.FlagSet) {
		switch sub {
		case "plan":
			fs.IntVar(&tokens, "context", 0, "tokens of context to plan for; 0: the plan's own choice")
		case "serve":
			fs.StringVar(&quant, "quant", "", "the quantisation to serve (Q4_K_M, ...); none: the plan's choice")
			fs.StringVar(&name, "name", "", "the catalog name; none: one made from the repository's")
			fs.IntVar(&tokens, "context", 0, "tokens of context per request; 0: the plan's choice")
			fs.IntVar(&replicas, "replicas", 1, "replicas to keep running; 0 starts one on the first request")
			fs.BoolVar(&wait, "wait", false, "follow the job's steps until it ends; exit 1 when it fails")
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
	default:
		return usageError{fmt.Errorf("%s is not a model command; use plan, serve or list", operr.Quote(sub))}
	}
	switch sub {
	case "plan":
		return modelPlan(ctx, c, fs.Arg(0), tokens, stdout)
	case "list":
		return modelList(ctx, c, stdout)
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
	if !wait {
		fmt.Fprintln(stdout, job.ID)
		fmt.Fprintf(stderr, "job %s started; modelserve model serve --wait follows one, and the console shows it at %s/jobs/%s\n", job.ID, c.shown, job.ID)
		return nil
	}
	fmt.Fprintf(stderr, "job %s\n", job.ID)
	return followJob(ctx, c, job.ID, stdout)
}

// modelPlan prints where each of a repository's files fits.
func modelPlan(ctx context.Context, c *client, repo string, tokens int, stdout io.Writer) error {
	path := "/api/v1/repos/" + repo
	if tokens > 0 {
		path += "?context=" + strconv.Itoa(tokens)
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
	fmt.Fprintln(tw, "FILE\tSIZE\tWHERE\tNEEDS\tCONTEXT\tTOKENS/S\tFIT")
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
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", file, size, where, words.GB(o.NeedGB), o.Context, tps, fit)
		}
	}
	return tw.Flush()
}

// modelList prints the catalog.
func modelList(ctx context.Context, c *client, stdout io.Writer) error {
	var list struct {
		Models []catalog.Model `json:"models"`
	}
	if err := c.do(ctx, "GET", "/api/v1/catalog", nil, &list); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tREPOSITORY\tCONTEXT\tREPLICAS\tKIND")
	for _, m := range list.Models {
		repo := "-"
		if m.Origin != nil {
			repo = m.Origin.Repo
		}
		kind := "chat"
		if m.Capabilities.Embeddings {
			kind = "embeddings"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", m.Name, repo, m.ContextLength, m.Scaling.Min, kind)
	}
	return tw.Flush()
}

// followJob prints a job's steps as they change, from its event stream,
// until it ends; a job that does not end done is an error with its
// sentence. A stream that closes before the end (the server dropped a
// watcher that fell behind, or restarted) is opened again, a few times.
func followJob(ctx context.Context, c *client, id string, stdout io.Writer) error {
	shown := map[string]string{}
	// show prints what changed, and says whether anything did.
	show := func(j jobs.Job) (changed bool) {
		for _, st := range j.Steps {
			line := st.State
			if st.Detail != "" {
				line += ": " + st.Detail
			}
			if shown[st.Name] == line {
				continue
			}
			shown[st.Name] = line
			fmt.Fprintf(stdout, "%-10s %s\n", st.Name, line)
			changed = true
		}
		return changed
	}
	var last jobs.Job
	for tries := 0; ; tries++ {
		// A stream that brought news earns its reconnects afresh; one
		// that repeats the job as it stood does not.
		ended, err := readJobEvents(ctx, c, id, func(j jobs.Job) {
			last = j
			if show(j) {
				tries = 0
			}
		})
		if err != nil && (ctx.Err() != nil || tries >= maxReconnects) {
			return err
		}
		if ended {
			break
		}
		if tries >= maxReconnects {
			return fmt.Errorf("the events of job %s stopped %d times before it ended; modelserve model serve --wait cannot follow it", id, maxReconnects)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(tries+1) * 500 * time.Millisecond):
		}
	}
	switch last.State {
	case jobs.Done:
		if last.Model != "" {
			fmt.Fprintf(stdout, "%s is served: modelserve chat %s\n", last.Model, last.Model)
		}
		return nil
	case jobs.Cancelled:
		return fmt.Errorf("job %s was cancelled", id)
	default:
		return fmt.Errorf("job %s failed: %s", id, or(last.Error, "the job's page says why"))
	}
}

// readJobEvents reads one connection of a job's event stream, calling
// each with every job it carries; ended says the job's end came.
func readJobEvents(ctx context.Context, c *client, id string, each func(jobs.Job)) (ended bool, err error) {
	resp, err := c.send(ctx, "GET", "/api/v1/jobs/"+url.PathEscape(id)+"/events", nil)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	err = readSSE(resp.Body, func(event string, data []byte) error {
		var j jobs.Job
		if err := json.Unmarshal(data, &j); err != nil {
			return fmt.Errorf("the events of job %s hold what is not a job: %w", id, err)
		}
		each(j)
		if event == "end" || j.Ended() {
			ended = true
		}
		return nil
	})
	return ended, err
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

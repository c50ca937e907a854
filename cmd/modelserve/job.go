package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"

	"modelserve/internal/operr"
	"modelserve/internal/words"
	"modelserve/jobs"
)

const jobUsage = `Usage: modelserve job list [--limit N] [-o json]
       modelserve job watch ID

list shows the jobs, newest first: serves, updates and restores, with their state.
watch follows a job's steps as they happen until it ends, as model serve --wait and
update --wait do for the job they start, and exits 1 when the job fails.
`

// maxJobList bounds the jobs one list asks for: the API's own bound.
const maxJobList = 500

// jobCmd runs `modelserve job list|watch`.
func jobCmd(ctx context.Context, cl call) error {
	if len(cl.args) == 0 {
		return usageError{errors.New("job needs a command: list, or watch ID")}
	}
	sub, args := cl.args[0], cl.args[1:]
	limit := 20
	var out *output
	fs, c, err := clientFlags("modelserve job "+sub, args, cl.getenv, cl.stderr, jobUsage, func(fs *flag.FlagSet) {
		if sub == "list" {
			fs.IntVar(&limit, "limit", limit, fmt.Sprintf("the newest jobs to show, at most %d", maxJobList))
			out = outputFlag(fs)
		}
	})
	if err != nil {
		return err
	}
	switch sub {
	case "list":
		if fs.NArg() != 0 {
			return usageError{errors.New("job list takes no arguments")}
		}
		if limit < 1 || limit > maxJobList {
			return usageError{fmt.Errorf("--limit is from 1 to %d", maxJobList)}
		}
		if err := out.check(); err != nil {
			return err
		}
		return jobList(ctx, c, limit, out, cl.stdout)
	case "watch":
		if fs.NArg() != 1 {
			return usageError{errors.New("job watch takes one job's ID: modelserve job list shows them")}
		}
		return followJob(ctx, c, fs.Arg(0), cl.stdout)
	}
	return usageError{fmt.Errorf("%s is not a job command; use list or watch", operr.Quote(sub))}
}

// jobList prints the newest jobs.
func jobList(ctx context.Context, c *client, limit int, out *output, stdout io.Writer) error {
	var list struct {
		Jobs []jobs.Job `json:"jobs"`
	}
	if err := c.do(ctx, "GET", "/api/v1/jobs?limit="+strconv.Itoa(limit), nil, &list); err != nil {
		return err
	}
	if list.Jobs == nil {
		list.Jobs = []jobs.Job{}
	}
	return out.print(stdout, list.Jobs, "ID\tKIND\tSTATE\tMODEL\tREPOSITORY\tSTARTED", func(tw io.Writer) {
		for _, j := range list.Jobs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, or(j.Kind, "-"), j.State, or(j.Model, "-"), or(j.Request.Repo, "-"), ago(j.Started, time.Now()))
		}
	})
}

// startedJob says what became of a job a command started: its ID, or with
// wait its steps until it ends.
func startedJob(ctx context.Context, c *client, job jobs.Job, wait bool, stdout, stderr io.Writer) error {
	if !wait {
		fmt.Fprintln(stdout, job.ID)
		fmt.Fprintf(stderr, "job %s started; modelserve job watch %s follows it, and the console shows it at %s/jobs/%s\n", job.ID, job.ID, c.shown, job.ID)
		return nil
	}
	fmt.Fprintf(stderr, "job %s\n", job.ID)
	return followJob(ctx, c, job.ID, stdout)
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
			return fmt.Errorf("the events of job %s stopped %d times before it ended; modelserve job watch %s follows it again", id, maxReconnects, id)
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

// ago is how long ago t was, in the words a terminal's listing uses ("3
// min ago"); "-" for no time.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return words.Span(now.Sub(t).Round(time.Second)) + " ago"
}

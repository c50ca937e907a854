package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"time"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/words"
)

// replicasAnswer is GET /api/v1/replicas: what the fleet runs, and how it
// fares with each model.
type replicasAnswer struct {
	Replicas []fleet.Replica     `json:"replicas"`
	Models   []fleet.ModelHealth `json:"models"`
}

// readReplicas is every page of GET /api/v1/replicas, as one answer: the
// API pages them by model, following each page's next.
func readReplicas(ctx context.Context, c *client) (replicasAnswer, error) {
	var all replicasAnswer
	for path := "/api/v1/replicas?limit=500"; path != ""; {
		var page struct {
			replicasAnswer
			Next string `json:"next"`
		}
		if err := c.do(ctx, "GET", path, nil, &page); err != nil {
			return replicasAnswer{}, err
		}
		all.Replicas = append(all.Replicas, page.Replicas...)
		all.Models = append(all.Models, page.Models...)
		path = page.Next
	}
	return all, nil
}

const psUsage = `Usage: modelserve ps [-o json]

The replicas the fleet runs, as ollama ps shows the models loaded: each replica's
model, state, node, memory (resident once ready, else the estimate it was placed
by) and how long it has been in that state. modelserve logs REPLICA shows a
replica's engine log; -o json leaves the logs out.
`

// psCmd runs `modelserve ps`.
func psCmd(ctx context.Context, cl call) error {
	var out *output
	fs, c, err := clientFlags("modelserve ps", cl.args, cl.getenv, cl.stderr, psUsage, func(fs *flag.FlagSet) { out = outputFlag(fs) })
	if err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageError{errors.New("ps takes no arguments")}
	}
	if err := out.check(); err != nil {
		return err
	}
	running, err := readReplicas(ctx, c)
	if err != nil {
		return err
	}
	reps := running.Replicas
	if reps == nil {
		reps = []fleet.Replica{}
	}
	for i := range reps {
		reps[i].Log = nil
	}
	now := time.Now()
	return out.print(cl.stdout, reps, "REPLICA\tMODEL\tSTATE\tNODE\tMEMORY\tSINCE", func(tw io.Writer) {
		for _, r := range reps {
			mem := words.Size(r.RSSBytes)
			if r.RSSBytes <= 0 {
				mem = words.Size(r.EstimateBytes) + " (estimate)"
			}
			since := r.ReadyAt
			if since.IsZero() {
				since = r.Started
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Model, r.State, or(r.Node, "-"), mem, ago(since, now))
		}
	})
}

const logsUsage = `Usage: modelserve logs REPLICA [-f]

The last lines a replica's engine wrote (the fleet keeps up to 200 of them);
with -f, the lines it writes next, until the replica stops or Ctrl-C.
modelserve ps lists the replicas.
`

// logsPoll is how often logs -f asks for a replica's log.
const logsPoll = 500 * time.Millisecond

// logsCmd runs `modelserve logs REPLICA [-f]`.
func logsCmd(ctx context.Context, cl call) error {
	var follow bool
	fs, c, err := clientFlags("modelserve logs", cl.args, cl.getenv, cl.stderr, logsUsage, func(fs *flag.FlagSet) {
		fs.BoolVar(&follow, "f", false, "follow the log until the replica stops")
		fs.BoolVar(&follow, "follow", false, "the same as -f")
	})
	if err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("logs takes one replica: modelserve logs REPLICA, and modelserve ps lists them")}
	}
	id := fs.Arg(0)
	path := "/api/v1/replicas/" + url.PathEscape(id) + "/log"
	var prev []string
	for first := true; ; first = false {
		var log struct {
			Lines []string `json:"lines"`
		}
		err := c.do(ctx, "GET", path, nil, &log)
		if err != nil {
			if !first && refusedWith(err, http.StatusNotFound) {
				fmt.Fprintf(cl.stderr, "replica %s has stopped\n", id)
				return nil
			}
			return err
		}
		for _, line := range newLines(prev, log.Lines) {
			fmt.Fprintln(cl.stdout, line)
		}
		prev = log.Lines
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(logsPoll):
		}
	}
}

// newLines are the lines of cur that prev had not: the fleet keeps a
// replica's last lines in a ring, so cur is what is left of prev, its
// oldest lines dropped, and then the new ones. With no overlap, every line
// of cur is new.
func newLines(prev, cur []string) []string {
	for drop := range len(prev) + 1 {
		kept := prev[drop:]
		if len(kept) <= len(cur) && slices.Equal(kept, cur[:len(kept)]) {
			return cur[len(kept):]
		}
	}
	return cur
}

const stopUsage = `Usage: modelserve stop MODEL

Stops a model's replicas, as ollama stop unloads a model: it sets the fewest
replicas the model keeps to 0, as the fleet page's scale form does, then stops each
replica it has, as the fleet page's Stop does. The model stays in the catalog and
starts on demand: its next request starts a replica again, which stops when idle.
To keep replicas running again, set its fewest on the fleet page.
`

// stopCmd runs `modelserve stop MODEL`.
func stopCmd(ctx context.Context, cl call) error {
	fs, c, err := clientFlags("modelserve stop", cl.args, cl.getenv, cl.stderr, stopUsage)
	if err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("stop takes one model: modelserve stop MODEL, and modelserve model list lists them")}
	}
	name := fs.Arg(0)
	model := "/api/v1/catalog/" + url.PathEscape(name)
	var m catalog.Model
	if err := c.do(ctx, "GET", model, nil, &m); err != nil {
		return err
	}
	// On demand first: a replica stopped while the model still wants it
	// is replaced at once.
	if m.Scaling.Min > 0 {
		body := map[string]int{"min": 0, "max": max(m.Scaling.Max, 1)}
		if err := c.do(ctx, "POST", model+"/scale", body, nil); err != nil {
			return err
		}
	}
	running, err := readReplicas(ctx, c)
	if err != nil {
		return err
	}
	stopped := 0
	for _, r := range running.Replicas {
		if r.Model != m.Name || r.State == fleet.Stopped {
			continue
		}
		err := c.do(ctx, "POST", "/api/v1/replicas/"+url.PathEscape(r.ID)+"/stop", nil, nil)
		if err != nil && !refusedWith(err, http.StatusNotFound) {
			return err
		}
		stopped++
	}
	fmt.Fprintf(cl.stderr, "%s of %s stopping; it starts again on its next request\n", words.Count(stopped, "replica", "replicas"), m.Name)
	return nil
}

// rmCmd runs `modelserve rm MODEL`.
func rmCmd(ctx context.Context, cl call) error {
	fs, c, err := clientFlags("modelserve rm", cl.args, cl.getenv, cl.stderr,
		"Usage: modelserve rm MODEL\n\nRemoves a model from the catalog, as the catalog page's Remove does: its replicas stop\n"+
			"and requests for it are refused. Its files stay on the mirror, and modelserve model serve adds it again.\n")
	if err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("rm takes one model: modelserve rm MODEL, and modelserve model list lists them")}
	}
	name := fs.Arg(0)
	if err := c.do(ctx, "DELETE", "/api/v1/catalog/"+url.PathEscape(name), nil, nil); err != nil {
		return err
	}
	fmt.Fprintf(cl.stderr, "%s removed from the catalog; its files stay on the mirror\n", name)
	return nil
}

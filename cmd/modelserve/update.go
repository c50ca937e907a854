package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"

	"modelserve/internal/hf"
	"modelserve/internal/updates"
	"modelserve/jobs"
)

const updateUsage = `Usage: modelserve update MODEL [--check] [--wait]

Tries the update available to a model, as the update's Try button in the console
does: a job serves the new weights beside the model as its canary, judged by its
evals before it takes a share of the requests. --check asks the model's repository
for new weights first (else the last check's finding is tried), and says when the
model is up to date. The job's ID is printed; --wait follows its steps, as
modelserve job watch ID does.
`

// updateCmd runs `modelserve update MODEL`.
func updateCmd(ctx context.Context, cl call) error {
	var check, wait bool
	fs, c, err := clientFlags("modelserve update", cl.args, cl.getenv, cl.stderr, updateUsage, func(fs *flag.FlagSet) {
		fs.BoolVar(&check, "check", false, "ask the repository for new weights first")
		fs.BoolVar(&wait, "wait", false, "follow the update's job until it ends; exit 1 when it fails")
	})
	if err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("update takes one model: modelserve update MODEL, and modelserve model list lists them")}
	}
	name := fs.Arg(0)
	model := "/api/v1/catalog/" + url.PathEscape(name)
	if check {
		var res updates.Result
		if err := c.do(ctx, "POST", model+"/check", nil, &res); err != nil {
			return err
		}
		switch res.Result {
		case updates.ResultUpToDate:
			fmt.Fprintf(cl.stderr, "%s is up to date at %s\n", name, hf.Short(res.Commit))
			return nil
		case updates.ResultFailed:
			return fmt.Errorf("the check of %s failed: %s", name, or(res.Error, "the catalog page says why"))
		}
	}
	var job jobs.Job
	if err := c.do(ctx, "POST", model+"/update", nil, &job); err != nil {
		return err
	}
	return startedJob(ctx, c, job, wait, cl.stdout, cl.stderr)
}

package main

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"time"

	"modelserve/catalog"
	"modelserve/internal/canary"
	"modelserve/internal/evals"
	"modelserve/internal/fleet"
	"modelserve/internal/gateway"
	"modelserve/internal/notify"
	"modelserve/internal/operr"
	"modelserve/internal/plan"
	"modelserve/jobs"
)

// newFleet is the fleet over the catalog in store, starting engine, and
// the catalog to hand to whatever changes it (jobs, handlers): it pokes the
// fleet after each change, so a model added starts at once.
// Each engine start's estimated and measured memory is kept in db, and so
// are the models parked, which a restart must not start again.
// The caller runs the fleet (Run) and waits for it on shutdown.
// budget, when not 0, is the memory the fleet may promise on this machine
// (--local-memory); residency is the least a used replica stays
// (fleet.Options.Residency).
func newFleet(engine, vllm string, budget, headroom int64, drainTimeout, residency time.Duration, store *catalog.Store, db *sql.DB, engines *fleet.Engines, stopEngines bool, notifier *notify.Notifier, log *slog.Logger) (*fleet.Fleet, *fleet.NotifyingCatalog, error) {
	node, err := fleet.Local(fleet.LocalConfig{Budget: budget, Engine: engine})
	if err != nil {
		return nil, nil, err
	}
	f, err := fleet.New(fleet.Options{Catalog: store, Engine: engine, VLLM: vllm, Nodes: []fleet.Node{node}, History: fleet.NewHistory(db), Parks: fleet.NewParks(db), Engines: engines, StopEnginesOnExit: stopEngines,
		Notify: notifier, Headroom: fleet.Headroom{RAM: headroom, Card: headroom}, DrainTimeout: drainTimeout, Residency: residency, Log: log.With("part", "fleet")})
	if err != nil {
		return nil, nil, err
	}
	return f, fleet.NewNotifyingCatalog(store, f), nil
}

// poolOf is the fleet's nodes as the handlers show the pool.
type poolOf func() []plan.Node

func (p poolOf) Nodes() []plan.Node { return p() }

// gatewayMeters are the gateway's meters as the update jobs read them: a
// version's requests as the canary's judge weighs them.
type gatewayMeters struct{ g *gateway.Gateway }

func (m gatewayMeters) Measure(name string) jobs.Meter { return gatewayMeter{m.g.Measure(name)} }

type gatewayMeter struct{ m *gateway.Meter }

func (m gatewayMeter) Stop() { m.m.Stop() }

func (m gatewayMeter) Read() canary.Arm {
	r := m.m.Read()
	return canary.Arm{Requests: r.Requests, Failed: r.Failed, Answered: r.Answered, TTFT: r.TTFTP50, TokensPerSecond: r.TokensPerSecond}
}

// jobsEvals runs a model's eval suite for an update's trial: a model
// without a suite is no failure, and a run that could not finish is.
type jobsEvals struct{ r *evals.Runner }

func (e jobsEvals) Run(ctx context.Context, model, target string) (canary.Eval, bool, error) {
	run, err := e.r.Run(ctx, model, target)
	switch {
	case errors.Is(err, evals.ErrNoSuite):
		return canary.Eval{}, false, nil
	case err != nil:
		return canary.Eval{}, false, err
	case run.State != evals.StateDone:
		return canary.Eval{}, false, operr.New(operr.Unavailable, "the eval run %d of %s on %s did not finish: %s", run.ID, model, target, run.Error)
	}
	return canary.Eval{Passed: run.Passed, Total: run.Total}, true, nil
}

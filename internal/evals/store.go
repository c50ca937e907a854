package evals

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"modelserve/internal/operr"
	dbstore "modelserve/internal/store"
)

// store keeps suites, runs and results in SQLite (tables eval_suites,
// eval_runs and eval_results, migrations/0013_evals.sql).
type store struct{ db *sql.DB }

// ErrNotFound is a run the store does not have.
var ErrNotFound = errors.New("no such eval run")

// row is a model's suite as its row in eval_suites holds it: the suite
// written out (Suite.JSON), when and by whom.
type row struct {
	text string
	at   time.Time
	by   string
}

// suite is model's suite as kept, and false when it has none. It is the
// row as it is: reading and compiling it is the kept suites' (suites).
func (s store) suite(ctx context.Context, model string) (row, bool, error) {
	var text, at, by string
	err := s.db.QueryRowContext(ctx, `SELECT cases, updated_at, updated_by FROM eval_suites WHERE model = ?`, model).
		Scan(&text, &at, &by)
	if errors.Is(err, sql.ErrNoRows) {
		return row{}, false, nil
	}
	if err != nil {
		return row{}, false, fmt.Errorf("read the eval suite of %s: %w", model, err)
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return row{}, false, fmt.Errorf("the eval suite of %s: %w", model, err)
	}
	return row{text: text, at: t, by: by}, true, nil
}

// setSuite keeps suite as model's, and returns the row as written; a
// suite of no cases removes it.
func (s store) setSuite(ctx context.Context, model string, suite Suite, at time.Time, by string) (row, error) {
	kept := row{text: string(suite.JSON()), by: by}
	stamp := at.UTC().Format(time.RFC3339Nano)
	var err error
	if len(suite.Cases) == 0 {
		_, err = s.db.ExecContext(ctx, `DELETE FROM eval_suites WHERE model = ?`, model)
	} else {
		_, err = s.db.ExecContext(ctx,
			`INSERT INTO eval_suites (model, cases, updated_at, updated_by) VALUES (?, ?, ?, ?)
			 ON CONFLICT (model) DO UPDATE SET cases = excluded.cases, updated_at = excluded.updated_at, updated_by = excluded.updated_by`,
			model, kept.text, stamp, by)
	}
	if err != nil && dbstore.Full(err) {
		return row{}, dbstore.FullError(err, fmt.Sprintf("the eval suite of %s could not be kept", operr.Quote(model)))
	}
	if err != nil {
		return row{}, fmt.Errorf("keep the eval suite of %s: %w", model, err)
	}
	// The time as it reads back, to the nanosecond and in UTC.
	kept.at, _ = time.Parse(time.RFC3339Nano, stamp)
	return kept, nil
}

// begin records a run as running and returns it with its id.
func (s store) begin(ctx context.Context, r Run) (Run, error) {
	res, err := s.db.ExecContext(ctx,
		`INSERT INTO eval_runs (model, target, target_commit, suite_digest, started_at, state, passed, total)
		 VALUES (?, ?, ?, ?, ?, ?, 0, ?)`,
		r.Model, r.Target, r.Commit, r.Suite, r.Started.UTC().Format(time.RFC3339Nano), StateRunning, r.Total)
	if err != nil {
		return Run{}, fmt.Errorf("record an eval run of %s: %w", r.Model, err)
	}
	if r.ID, err = res.LastInsertId(); err != nil {
		return Run{}, fmt.Errorf("record an eval run of %s: %w", r.Model, err)
	}
	r.State = StateRunning
	return r, nil
}

// errNotRunning is a result for a run that is no longer running: a start
// of modelserve failed it while this process still asked its cases.
var errNotRunning = errors.New("the run is no longer running")

// result records case position's verdict in run id, and counts it when
// it passed, in one transaction; a run no longer running takes no more
// results (errNotRunning).
func (s store) result(ctx context.Context, id int64, position int, res Result) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("record a result of eval run %d: %w", id, err)
	}
	defer tx.Rollback()
	up, err := tx.ExecContext(ctx, `UPDATE eval_runs SET passed = passed + ? WHERE id = ? AND state = ?`, res.Pass, id, StateRunning)
	if err != nil {
		return fmt.Errorf("record a result of eval run %d: %w", id, err)
	}
	if n, err := up.RowsAffected(); err != nil {
		return fmt.Errorf("record a result of eval run %d: %w", id, err)
	} else if n == 0 {
		return errNotRunning
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO eval_results (run_id, position, name, kind, pass, answer, reason, latency_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		id, position, res.Case, res.Kind, res.Pass, res.Answer, res.Reason, res.Latency); err != nil {
		return fmt.Errorf("record a result of eval run %d: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("record a result of eval run %d: %w", id, err)
	}
	return nil
}

// finish ends run id in state, with the sentence why when it failed. A
// run no longer running (failed at a start of modelserve while this one
// still ran it: two processes on one database) is left as it is.
func (s store) finish(ctx context.Context, id int64, state, why string, at time.Time) error {
	if _, err := s.db.ExecContext(ctx,
		`UPDATE eval_runs SET state = ?, error = ?, finished_at = ? WHERE id = ? AND state = ?`,
		state, why, at.UTC().Format(time.RFC3339Nano), id, StateRunning); err != nil {
		return fmt.Errorf("end eval run %d: %w", id, err)
	}
	return nil
}

// failRunning fails every run still running, saying how far each got: the
// modelserve that ran them stopped without ending them.
func (s store) failRunning(ctx context.Context, at time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx,
		`UPDATE eval_runs SET state = ?, finished_at = ?,
			error = printf('modelserve stopped while the run was running, after %d of %d cases: run it again',
				(SELECT COUNT(*) FROM eval_results WHERE run_id = eval_runs.id), total)
		 WHERE state = ?`,
		StateFailed, at.UTC().Format(time.RFC3339Nano), StateRunning)
	if err != nil {
		return 0, fmt.Errorf("end the eval runs a stop left running: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("end the eval runs a stop left running: %w", err)
	}
	return n, nil
}

// runs are model's newest runs, newest first, without their results.
func (s store) runs(ctx context.Context, model string, limit int) ([]Run, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+runColumns+` FROM eval_runs WHERE model = ? ORDER BY id DESC LIMIT ?`, model, limit)
	if err != nil {
		return nil, fmt.Errorf("list the eval runs of %s: %w", model, err)
	}
	defer rows.Close()
	out := []Run{}
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, fmt.Errorf("list the eval runs of %s: %w", model, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the eval runs of %s: %w", model, err)
	}
	return out, nil
}

// run is run id with its results, in the suite's order.
func (s store) run(ctx context.Context, id int64) (Run, error) {
	r, err := scanRun(s.db.QueryRowContext(ctx, `SELECT `+runColumns+` FROM eval_runs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, operr.Wrap(operr.NotFound, ErrNotFound, "there is no eval run %d: GET /api/v1/catalog/{name}/evals lists a model's runs", id)
	}
	if err != nil {
		return Run{}, fmt.Errorf("read eval run %d: %w", id, err)
	}
	rows, err := s.db.QueryContext(ctx,
		`SELECT name, kind, pass, answer, reason, latency_ms FROM eval_results WHERE run_id = ? ORDER BY position`, id)
	if err != nil {
		return Run{}, fmt.Errorf("read the results of eval run %d: %w", id, err)
	}
	defer rows.Close()
	r.Results = []Result{}
	for rows.Next() {
		var res Result
		if err := rows.Scan(&res.Case, &res.Kind, &res.Pass, &res.Answer, &res.Reason, &res.Latency); err != nil {
			return Run{}, fmt.Errorf("read the results of eval run %d: %w", id, err)
		}
		r.Results = append(r.Results, res)
	}
	if err := rows.Err(); err != nil {
		return Run{}, fmt.Errorf("read the results of eval run %d: %w", id, err)
	}
	return r, nil
}

const runColumns = `id, model, target, target_commit, suite_digest, started_at, finished_at, state, passed, total, error`

// scanRun reads a row of SELECT runColumns FROM eval_runs.
func scanRun(row interface{ Scan(...any) error }) (Run, error) {
	var r Run
	var started, finished string
	if err := row.Scan(&r.ID, &r.Model, &r.Target, &r.Commit, &r.Suite, &started, &finished, &r.State, &r.Passed, &r.Total, &r.Error); err != nil {
		return Run{}, err
	}
	var err error
	if r.Started, err = time.Parse(time.RFC3339Nano, started); err != nil {
		return Run{}, fmt.Errorf("eval run %d: %w", r.ID, err)
	}
	if finished != "" {
		if r.Finished, err = time.Parse(time.RFC3339Nano, finished); err != nil {
			return Run{}, fmt.Errorf("eval run %d: %w", r.ID, err)
		}
	}
	return r, nil
}

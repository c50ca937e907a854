package jobs

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"modelserve/internal/operr"
)

// save writes the job and, when step is not negative, that one step, in one
// transaction: a job is written on each change, and one change touches the
// job and at most one step.
func save(ctx context.Context, db *sql.DB, j Job, seq int64, step int) error {
	if step < 0 || step >= len(j.Steps) {
		return saveSteps(ctx, db, j, seq)
	}
	return saveSteps(ctx, db, j, seq, step)
}

// saveWhole writes the job and every one of its steps: after a save that
// failed, which steps the database lacks is not known.
func saveWhole(ctx context.Context, db *sql.DB, j Job, seq int64) error {
	all := make([]int, len(j.Steps))
	for i := range all {
		all[i] = i
	}
	return saveSteps(ctx, db, j, seq, all...)
}

// saveSteps writes the job and the steps at positions, in one transaction.
func saveSteps(ctx context.Context, db *sql.DB, j Job, seq int64, positions ...int) error {
	req, err := json.Marshal(j.Request)
	if err != nil {
		return fmt.Errorf("encode the request of job %s: %w", j.ID, err)
	}
	back, err := j.back.encode()
	if err != nil {
		return fmt.Errorf("encode what job %s has to take back: %w", j.ID, err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("save job %s: %w", j.ID, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO jobs (id, kind, state, request, requested_by, if_absent, error, model, commit_sha,
			reply, tokens_per_second, retry_of, seq, started, finished, added_model, trace_id, trace_span, take_back)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET state = excluded.state, error = excluded.error,
			model = excluded.model, commit_sha = excluded.commit_sha, reply = excluded.reply,
			tokens_per_second = excluded.tokens_per_second, seq = excluded.seq, finished = excluded.finished,
			added_model = excluded.added_model, trace_id = excluded.trace_id, trace_span = excluded.trace_span,
			take_back = excluded.take_back`,
		j.ID, j.Kind, j.State, string(req), j.Request.By, j.Request.IfAbsent, j.Error, j.Model, j.Commit,
		j.Reply, j.TokensPerSecond, j.RetryOf, seq, j.Started.UnixNano(), nanos(j.Finished), j.Added, j.TraceID, j.TraceSpan, back); err != nil {
		return fmt.Errorf("save job %s: %w", j.ID, err)
	}
	for _, step := range positions {
		st := j.Steps[step]
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO job_steps (job_id, position, name, state, detail, at, bytes_done, bytes_total)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (job_id, position) DO UPDATE SET name = excluded.name, state = excluded.state,
				detail = excluded.detail, at = excluded.at, bytes_done = excluded.bytes_done,
				bytes_total = excluded.bytes_total`,
			j.ID, step, st.Name, st.State, st.Detail, st.At.UnixNano(), st.BytesDone, st.BytesTotal); err != nil {
			return fmt.Errorf("save step %s of job %s: %w", st.Name, j.ID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("save job %s: %w", j.ID, err)
	}
	return nil
}

// nanos stores a time as Unix nanoseconds, and no time as NULL.
func nanos(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

const jobColumns = `id, kind, state, request, requested_by, if_absent, error, model, commit_sha,
	reply, tokens_per_second, retry_of, seq, started, finished, added_model, trace_id, trace_span, take_back`

// scanJob reads the columns of jobColumns, and the job's change number.
func scanJob(row interface{ Scan(...any) error }) (Job, int64, error) {
	var (
		j            Job
		req          string
		seq, started int64
		finished     sql.NullInt64
		requestedBy  string
		ifAbsent     bool
		back         string
	)
	if err := row.Scan(&j.ID, &j.Kind, &j.State, &req, &requestedBy, &ifAbsent, &j.Error, &j.Model, &j.Commit,
		&j.Reply, &j.TokensPerSecond, &j.RetryOf, &seq, &started, &finished, &j.Added, &j.TraceID, &j.TraceSpan, &back); err != nil {
		return Job{}, 0, err
	}
	var err error
	if j.back, err = decodeTakeBack(back); err != nil {
		return Job{}, 0, fmt.Errorf("decode what job %s has to take back: %w", j.ID, err)
	}
	if err := json.Unmarshal([]byte(req), &j.Request); err != nil {
		return Job{}, 0, fmt.Errorf("decode the request of job %s: %w", j.ID, err)
	}
	j.Request.By, j.Request.IfAbsent = requestedBy, ifAbsent
	j.Started = fromNanos(started)
	if finished.Valid {
		j.Finished = fromNanos(finished.Int64)
	}
	j.Steps = []Step{}
	return j, seq, nil
}

// load reads one job with its steps, or an error matching ErrNotFound.
func load(ctx context.Context, db *sql.DB, id string) (Job, int64, error) {
	j, seq, err := scanJob(db.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Job{}, 0, notFound(id)
	}
	if err != nil {
		return Job{}, 0, fmt.Errorf("read job %s: %w", id, err)
	}
	list := []*Job{&j}
	if err := loadSteps(ctx, db, list); err != nil {
		return Job{}, 0, err
	}
	return j, seq, nil
}

// loadSteps fills in the steps of the jobs listed, in one query.
func loadSteps(ctx context.Context, db *sql.DB, list []*Job) error {
	if len(list) == 0 {
		return nil
	}
	byID := make(map[string]*Job, len(list))
	args := make([]any, 0, len(list))
	for _, j := range list {
		byID[j.ID] = j
		args = append(args, j.ID)
	}
	rows, err := db.QueryContext(ctx, `
		SELECT job_id, name, state, detail, at, bytes_done, bytes_total FROM job_steps
		WHERE job_id IN (?`+strings.Repeat(", ?", len(list)-1)+`) ORDER BY job_id, position`, args...)
	if err != nil {
		return fmt.Errorf("read the steps of %d job(s): %w", len(list), err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id string
			st Step
			at int64
		)
		if err := rows.Scan(&id, &st.Name, &st.State, &st.Detail, &at, &st.BytesDone, &st.BytesTotal); err != nil {
			return fmt.Errorf("read the steps of %d job(s): %w", len(list), err)
		}
		st.At = fromNanos(at)
		if j := byID[id]; j != nil {
			j.Steps = append(j.Steps, st)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the steps of %d job(s): %w", len(list), err)
	}
	return nil
}

// ListOptions page through the jobs, newest first.
type ListOptions struct {
	// Limit is how many to return: 50 when 0, at most 500.
	Limit int
	// Offset skips that many of the newest. Each job skipped is read, so
	// a deep page costs what it skips: Before does not.
	Offset int
	// Before, a job id, lists the jobs older than that one (then Offset
	// counts from there): a cursor that does not shift when new jobs start,
	// and that the index on (started, id) finds in one seek at any depth.
	Before string
}

func listJobs(ctx context.Context, db *sql.DB, o ListOptions) ([]Job, int, error) {
	limit := o.Limit
	switch {
	case limit <= 0:
		limit = 50
	case limit > 500:
		limit = 500
	}
	if o.Offset < 0 {
		return nil, 0, invalid("offset cannot be negative: give 0 to start from the newest job")
	}
	// Kept by triggers (migration 0011): COUNT(*) would read the whole
	// index on every page.
	var total int
	if err := db.QueryRowContext(ctx, `SELECT n FROM jobs_count`).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("count jobs: %w", err)
	}
	q := `SELECT ` + jobColumns + ` FROM jobs`
	args := []any{}
	if o.Before != "" {
		var started int64
		err := db.QueryRowContext(ctx, `SELECT started FROM jobs WHERE id = ?`, o.Before).Scan(&started)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, 0, invalid("there is no job %s to list from: give the id of a job in the list", operr.Quote(o.Before))
		}
		if err != nil {
			return nil, 0, fmt.Errorf("list jobs: %w", err)
		}
		// A row value: SQLite seeks to it in jobs_newest (started DESC,
		// id DESC) and reads on from there, however deep the page.
		q += ` WHERE (started, id) < (?, ?)`
		args = append(args, started, o.Before)
	}
	q += ` ORDER BY started DESC, id DESC LIMIT ? OFFSET ?`
	args = append(args, limit, o.Offset)
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, 0, fmt.Errorf("list jobs: %w", err)
	}
	defer rows.Close()
	out := []Job{}
	for rows.Next() {
		j, _, err := scanJob(rows)
		if err != nil {
			return nil, 0, fmt.Errorf("list jobs: %w", err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("list jobs: %w", err)
	}
	ptrs := make([]*Job, len(out))
	for i := range out {
		ptrs[i] = &out[i]
	}
	if err := loadSteps(ctx, db, ptrs); err != nil {
		return nil, 0, err
	}
	return out, total, nil
}

// runningIDs are the jobs the database says are running: those a stopped
// process left, for Resume.
func runningIDs(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT id FROM jobs WHERE state = 'running' ORDER BY started, id`)
	if err != nil {
		return nil, fmt.Errorf("find running jobs: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("find running jobs: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// startUnclean counts one more process running job id that has not (yet)
// stopped it cleanly, and returns how many there were before this one.
func startUnclean(ctx context.Context, db *sql.DB, id string) (int, error) {
	var before int
	err := db.QueryRowContext(ctx, `UPDATE jobs SET unclean_starts = unclean_starts + 1 WHERE id = ? RETURNING unclean_starts - 1`, id).Scan(&before)
	if err != nil {
		return 0, fmt.Errorf("count a start of job %s: %w", id, err)
	}
	return before, nil
}

// stoppedCleanly forgets the starts of job id: the process stopped it on
// purpose, and the next start carries it on as if nothing happened.
func stoppedCleanly(ctx context.Context, db *sql.DB, id string) error {
	_, err := db.ExecContext(ctx, `UPDATE jobs SET unclean_starts = 0 WHERE id = ?`, id)
	return err
}

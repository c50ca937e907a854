package fleet

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Engines keeps the local engines that outlive modelserve: a record of
// each running engine in SQLite (the table running_engines), and each
// engine's output in a file of its own under dir. An engine that was
// modelserve's child died with it, and every model came back only after
// a cold load (minutes for a large one); recorded, the next modelserve on
// the same data folder adopts it instead (Adopt). A nil *Engines keeps
// nothing, and the engines then end with the fleet's Run: nothing could
// adopt them.
type Engines struct {
	db  *sql.DB
	dir string
}

// NewEngines keeps the engines' records in db, whose migrations have run,
// and their output in dir, made when first needed.
func NewEngines(db *sql.DB, dir string) *Engines { return &Engines{db: db, dir: dir} }

// engineWrite bounds each write of a record.
const engineWrite = 5 * time.Second

// engineRecord is one running engine as kept.
type engineRecord struct {
	Replica, Model, Profile, Fingerprint, Node, Engine string
	id                                                 identity
	PID                                                int
	Endpoint, Key                                      string
	MemBytes                                           int64
	Cards                                              []int
	Threads, Pool, Slots                               int
	Weights                                            string
	Args, Env                                          []string
	Startup                                            time.Duration
	Started, ReadyAt                                   time.Time
}

// logPath is where replica id's engine writes its output.
func (e *Engines) logPath(id string) (string, error) {
	if err := os.MkdirAll(e.dir, 0o700); err != nil {
		return "", fmt.Errorf("the engines' log folder %s cannot be made: %w", e.dir, err)
	}
	return filepath.Join(e.dir, id+".log"), nil
}

// keep records a running engine, replacing the record of its replica's
// engine before.
func (e *Engines) keep(ctx context.Context, r engineRecord) error {
	cards, _ := json.Marshal(r.Cards)
	args, _ := json.Marshal(r.Args)
	env, _ := json.Marshal(r.Env)
	var ready any
	if !r.ReadyAt.IsZero() {
		ready = r.ReadyAt.UTC().Format(time.RFC3339Nano)
	}
	_, err := e.db.ExecContext(ctx, `INSERT INTO running_engines (replica, model, profile, fingerprint, node, engine,
		pid, start_ticks, exe, uid, endpoint, key, mem_bytes, cards, threads, pool, slots, weights, args, env,
		startup_ms, started_at, ready_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (replica) DO UPDATE SET model = excluded.model, profile = excluded.profile,
			fingerprint = excluded.fingerprint, node = excluded.node, engine = excluded.engine, pid = excluded.pid,
			start_ticks = excluded.start_ticks, exe = excluded.exe, uid = excluded.uid, endpoint = excluded.endpoint,
			key = excluded.key, mem_bytes = excluded.mem_bytes, cards = excluded.cards, threads = excluded.threads,
			pool = excluded.pool, slots = excluded.slots, weights = excluded.weights, args = excluded.args,
			env = excluded.env, startup_ms = excluded.startup_ms, started_at = excluded.started_at, ready_at = excluded.ready_at`,
		r.Replica, r.Model, r.Profile, r.Fingerprint, r.Node, r.Engine, r.PID, r.id.start, r.id.exe, r.id.uid,
		r.Endpoint, r.Key, r.MemBytes, string(cards), r.Threads, r.Pool, r.Slots, r.Weights, string(args), string(env),
		r.Startup.Milliseconds(), r.Started.UTC().Format(time.RFC3339Nano), ready)
	if err != nil {
		return fmt.Errorf("recording the engine of replica %s: %w", r.Replica, err)
	}
	return nil
}

// ready records that replica id's engine became ready at.
func (e *Engines) ready(ctx context.Context, id string, at time.Time) error {
	_, err := e.db.ExecContext(ctx, `UPDATE running_engines SET ready_at = ? WHERE replica = ?`, at.UTC().Format(time.RFC3339Nano), id)
	if err != nil {
		return fmt.Errorf("recording that the engine of replica %s is ready: %w", id, err)
	}
	return nil
}

// forget deletes replica id's record, and its engine's log with it: its
// engine has exited, or is not the one recorded.
func (e *Engines) forget(ctx context.Context, id string) error {
	if _, err := e.db.ExecContext(ctx, `DELETE FROM running_engines WHERE replica = ?`, id); err != nil {
		return fmt.Errorf("forgetting the engine of replica %s: %w", id, err)
	}
	if p, err := e.logPath(id); err == nil {
		_ = os.Remove(p)
	}
	return nil
}

// list is every record.
func (e *Engines) list(ctx context.Context) ([]engineRecord, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT replica, model, profile, fingerprint, node, engine, pid, start_ticks, exe, uid,
		endpoint, key, mem_bytes, cards, threads, pool, slots, weights, args, env, startup_ms, started_at, ready_at
		FROM running_engines ORDER BY replica`)
	if err != nil {
		return nil, fmt.Errorf("reading the running engines: %w", err)
	}
	defer rows.Close()
	var out []engineRecord
	for rows.Next() {
		var (
			r                       engineRecord
			cards, args, env, start string
			ready                   sql.NullString
			startupMS               int64
		)
		if err := rows.Scan(&r.Replica, &r.Model, &r.Profile, &r.Fingerprint, &r.Node, &r.Engine, &r.PID, &r.id.start,
			&r.id.exe, &r.id.uid, &r.Endpoint, &r.Key, &r.MemBytes, &cards, &r.Threads, &r.Pool, &r.Slots, &r.Weights,
			&args, &env, &startupMS, &start, &ready); err != nil {
			return nil, fmt.Errorf("reading the running engines: %w", err)
		}
		_ = json.Unmarshal([]byte(cards), &r.Cards)
		_ = json.Unmarshal([]byte(args), &r.Args)
		_ = json.Unmarshal([]byte(env), &r.Env)
		r.Startup = time.Duration(startupMS) * time.Millisecond
		r.Started, _ = time.Parse(time.RFC3339Nano, start)
		if ready.Valid {
			r.ReadyAt, _ = time.Parse(time.RFC3339Nano, ready.String)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the running engines: %w", err)
	}
	return out, nil
}

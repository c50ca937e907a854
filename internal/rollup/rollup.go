// Package rollup keeps a minute-by-minute record of what the gateway and
// the fleet measure, for the console's charts of the last hour and their
// JSON twins.
//
// The gateway knows the last minute of each model's requests (Traffic) and
// counts what a catalog entry serves while a meter runs (Measure); the
// fleet knows each node's memory as it stands (Nodes). None of them
// remembers an hour, and none survives a restart. A Recorder reads them
// once a minute and writes the minute to SQLite, one row per model and per
// node, pruned to the newest day as it writes; it keeps the last hour in
// memory too, so that a page's stream, which looks every second, reads no
// database.
package rollup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/gateway"
)

// Keep is how long a minute is kept in the database: the rows are at most
// Keep's minutes for each model and node seen in that time.
const Keep = 24 * time.Hour

// Window is what a chart shows and the Recorder keeps in memory: the last
// hour.
const Window = time.Hour

// ModelMinute is one minute of a model's requests at the gateway.
type ModelMinute struct {
	// Minute is when the minute began.
	Minute time.Time `json:"minute"`
	// Requests are the requests the model served that ended in the
	// minute, answered or refused (gateway.Measurement).
	Requests int `json:"requests"`
	// P50Ms is the median latency, in milliseconds, of the answered
	// requests of the last minute as the gateway saw it at the minute's
	// end (gateway.Traffic): arrival to the answer's end; 0 when none was
	// answered.
	P50Ms float64 `json:"p50_ms"`
	// TokensPerSecond is the completion tokens over the time spent
	// generating them, of the minute's answered requests; 0 when none
	// reported them.
	TokensPerSecond float64 `json:"tokens_per_second"`
	// Partial marks the minute in progress, counted so far.
	Partial bool `json:"partial,omitempty"`
}

// NodeMinute is a node's memory at the end of a minute, in bytes.
type NodeMinute struct {
	Minute time.Time `json:"minute"`
	// PromisedBytes is the sum of the memory figures of the replicas
	// placed on the node; MeasuredBytes the resident memory measured of
	// their engines; FreeBytes what another replica could be promised.
	PromisedBytes int64 `json:"promised_bytes"`
	MeasuredBytes int64 `json:"measured_bytes"`
	FreeBytes     int64 `json:"free_bytes"`
	// Partial marks the minute in progress: the node as it stands now.
	Partial bool `json:"partial,omitempty"`
}

// Gateway is what the Recorder reads of the gateway (GatewayOf adapts
// gateway.Gateway).
type Gateway interface {
	Traffic() map[string]gateway.Traffic
	Measure(name string) Meter
}

// Meter is one catalog entry's count since it was started
// (gateway.Meter).
type Meter interface {
	Stop()
	Read() gateway.Measurement
}

// GatewayOf is g as the Recorder reads it.
func GatewayOf(g *gateway.Gateway) Gateway { return gatewayOf{g} }

type gatewayOf struct{ g *gateway.Gateway }

func (g gatewayOf) Traffic() map[string]gateway.Traffic { return g.g.Traffic() }
func (g gatewayOf) Measure(name string) Meter           { return g.g.Measure(name) }

// Fleet is what the Recorder reads of the fleet (fleet.Fleet): the
// nodes, and the replicas whose measured memory is summed on each.
type Fleet interface {
	Nodes() []fleet.NodeStatus
	Replicas() []fleet.Replica
}

// Catalog names the models whose requests are counted (catalog.Store).
type Catalog interface {
	List(ctx context.Context) ([]catalog.Model, error)
}

// Deps are what a Recorder needs; New refuses a missing one by name,
// but Gateway and Fleet, whose figures are then not kept.
type Deps struct {
	DB      *sql.DB
	Catalog Catalog
	Gateway Gateway
	Fleet   Fleet
	// Now is the clock the minutes are read by; nil is time.Now.
	Now func() time.Time
	Log *slog.Logger
}

// Recorder writes a minute of each model's requests and each node's
// memory once a minute (Run), and answers the last hour of them. Its
// methods are safe for concurrent use.
type Recorder struct {
	d Deps

	mu sync.Mutex
	// meters count each catalog model's minute in progress.
	meters map[string]Meter
	// models and nodes are the last Window of minutes written, oldest
	// first, by name.
	models map[string][]ModelMinute
	nodes  map[string][]NodeMinute
	// changed wakes Run to count a model added to the catalog at once.
	changed chan struct{}
}

// New makes a Recorder and reads the last hour back from the database, so
// a restart keeps the charts.
func New(ctx context.Context, d Deps) (*Recorder, error) {
	for name, missing := range map[string]bool{"DB": d.DB == nil, "Catalog": d.Catalog == nil} {
		if missing {
			return nil, errors.New("rollup: Deps." + name + " is required")
		}
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	r := &Recorder{d: d, meters: map[string]Meter{}, models: map[string][]ModelMinute{}, nodes: map[string][]NodeMinute{},
		changed: make(chan struct{}, 1)}
	if err := r.load(ctx, d.Now().Truncate(time.Minute).Add(-Window)); err != nil {
		return nil, err
	}
	return r, nil
}

// load reads the minutes that began at or after since into memory.
func (r *Recorder) load(ctx context.Context, since time.Time) error {
	err := loadSeries(ctx, r.d.DB, r.models, `SELECT model, minute, requests, p50_ms, tokens_per_second
		FROM model_minutes WHERE minute >= ? ORDER BY minute`, since,
		func(m *ModelMinute) []any { return []any{&m.Requests, &m.P50Ms, &m.TokensPerSecond} },
		func(m *ModelMinute, at time.Time) { m.Minute = at })
	if err != nil {
		return fmt.Errorf("read the models' minutes: %w", err)
	}
	err = loadSeries(ctx, r.d.DB, r.nodes, `SELECT node, minute, promised_bytes, measured_bytes, free_bytes
		FROM node_minutes WHERE minute >= ? ORDER BY minute`, since,
		func(n *NodeMinute) []any { return []any{&n.PromisedBytes, &n.MeasuredBytes, &n.FreeBytes} },
		func(n *NodeMinute, at time.Time) { n.Minute = at })
	if err != nil {
		return fmt.Errorf("read the nodes' minutes: %w", err)
	}
	return nil
}

// loadSeries appends to series the rows query answers for since, each a
// name, a minute's start, then the figures fields points to.
func loadSeries[T any](ctx context.Context, db *sql.DB, series map[string][]T, query string, since time.Time,
	fields func(*T) []any, setMinute func(*T, time.Time)) error {
	rows, err := db.QueryContext(ctx, query, since.Unix())
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var at int64
		var v T
		if err := rows.Scan(append([]any{&name, &at}, fields(&v)...)...); err != nil {
			return err
		}
		setMinute(&v, time.Unix(at, 0).UTC())
		series[name] = append(series[name], v)
	}
	return rows.Err()
}

// Run starts counting at once and writes each minute as it ends, until
// ctx ends. A minute that cannot be written is logged and the next one
// tried.
func (r *Recorder) Run(ctx context.Context) {
	if _, err := r.turnMeters(ctx); err != nil && ctx.Err() == nil {
		r.d.Log.Error("starting the per-minute counts of the models' requests", "err", err)
	}
	defer r.stopMeters()
	for {
		now := r.d.Now()
		next := now.Truncate(time.Minute).Add(time.Minute)
		t := time.NewTimer(next.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-r.changed:
			t.Stop()
			if err := r.addMeters(ctx); err != nil && ctx.Err() == nil {
				r.d.Log.Error("starting the count of a model's requests", "err", err)
			}
			continue
		case <-t.C:
		}
		if err := r.Record(ctx, next); err != nil && ctx.Err() == nil {
			r.d.Log.Error("writing the minute's figures for the charts", "minute", next.Add(-time.Minute).UTC().Format("15:04"), "err", err)
		}
	}
}

// Record writes the minute that ends at end: each catalog model's
// requests counted since the last Record (the meters are turned over),
// and each node's memory as it stands. Rows older than Keep go in the same
// transaction, so the table never holds more than a day.
func (r *Recorder) Record(ctx context.Context, end time.Time) error {
	minute := end.Add(-time.Minute).Truncate(time.Minute).UTC()
	measured, err := r.turnMeters(ctx)
	if err != nil {
		return err
	}
	var traffic map[string]gateway.Traffic
	if r.d.Gateway != nil {
		traffic = r.d.Gateway.Traffic()
	}
	models := make(map[string]ModelMinute, len(measured))
	for name, m := range measured {
		models[name] = modelMinute(minute, m, traffic[name])
	}
	nodes := r.nodesNow(minute)
	if err := r.write(ctx, minute, models, nodes); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, m := range models {
		r.models[name] = append(r.models[name], m)
	}
	for name, n := range nodes {
		r.nodes[name] = append(r.nodes[name], n)
	}
	since := end.Truncate(time.Minute).Add(-Window)
	trim(r.models, func(m ModelMinute) time.Time { return m.Minute }, since)
	trim(r.nodes, func(n NodeMinute) time.Time { return n.Minute }, since)
	return nil
}

// modelMinute is a model's minute from its meter's count and the
// gateway's last minute.
func modelMinute(minute time.Time, m gateway.Measurement, t gateway.Traffic) ModelMinute {
	out := ModelMinute{Minute: minute, Requests: m.Requests, TokensPerSecond: m.TokensPerSecond}
	// The gateway's last minute is the sixty seconds before now, which
	// may hold answers of the minute before: a minute none was answered
	// in has no latency of its own.
	if t.Answered > 0 && m.Answered > 0 {
		out.P50Ms = float64(t.P50) / float64(time.Millisecond)
	}
	return out
}

// turnMeters starts a new meter for each model of the catalog and stops
// the old one, answering what each old one counted: the requests of the
// minute that ends. A model gone from the catalog has its meter stopped.
func (r *Recorder) turnMeters(ctx context.Context) (map[string]gateway.Measurement, error) {
	if r.d.Gateway == nil {
		return nil, nil
	}
	list, err := r.d.Catalog.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the catalog's models to count their requests: %w", err)
	}
	fresh := make(map[string]Meter, len(list))
	for _, m := range list {
		// The new one first: a request that ends between the two is
		// counted twice rather than never.
		fresh[m.Name] = r.d.Gateway.Measure(m.Name)
	}
	r.mu.Lock()
	old := r.meters
	r.meters = fresh
	r.mu.Unlock()
	out := make(map[string]gateway.Measurement, len(old))
	for name, m := range old {
		m.Stop()
		if _, ok := fresh[name]; ok {
			out[name] = m.Read()
		}
	}
	return out, nil
}

// Changed tells the Recorder that the catalog changed: a model added is
// counted from now rather than from the next minute (Run does it).
func (r *Recorder) Changed() {
	select {
	case r.changed <- struct{}{}:
	default: // already told
	}
}

// addMeters starts a meter for each model of the catalog that has none.
func (r *Recorder) addMeters(ctx context.Context) error {
	if r.d.Gateway == nil {
		return nil
	}
	list, err := r.d.Catalog.List(ctx)
	if err != nil {
		return fmt.Errorf("read the catalog's models to count their requests: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range list {
		if _, ok := r.meters[m.Name]; !ok {
			r.meters[m.Name] = r.d.Gateway.Measure(m.Name)
		}
	}
	return nil
}

func (r *Recorder) stopMeters() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.meters {
		m.Stop()
	}
	r.meters = map[string]Meter{}
}

// nodesNow is each node's memory as the fleet has it now.
func (r *Recorder) nodesNow(minute time.Time) map[string]NodeMinute {
	if r.d.Fleet == nil {
		return nil
	}
	rss := map[string]int64{}
	for _, rep := range r.d.Fleet.Replicas() {
		rss[rep.Node] += rep.RSSBytes
	}
	out := map[string]NodeMinute{}
	for _, n := range r.d.Fleet.Nodes() {
		out[n.Name] = NodeMinute{Minute: minute, PromisedBytes: n.PromisedBytes, MeasuredBytes: rss[n.Name], FreeBytes: n.FreeBytes}
	}
	return out
}

// write puts a minute's rows in the database and prunes those older than
// Keep, in one transaction.
func (r *Recorder) write(ctx context.Context, minute time.Time, models map[string]ModelMinute, nodes map[string]NodeMinute) error {
	tx, err := r.d.DB.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("write the minute's figures: %w", err)
	}
	defer tx.Rollback()
	at := minute.Unix()
	for name, m := range models {
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO model_minutes (model, minute, requests, p50_ms, tokens_per_second)
			VALUES (?, ?, ?, ?, ?)`, name, at, m.Requests, m.P50Ms, m.TokensPerSecond); err != nil {
			return fmt.Errorf("write %s's minute: %w", name, err)
		}
	}
	for name, n := range nodes {
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO node_minutes (node, minute, promised_bytes, measured_bytes, free_bytes)
			VALUES (?, ?, ?, ?, ?)`, name, at, n.PromisedBytes, n.MeasuredBytes, n.FreeBytes); err != nil {
			return fmt.Errorf("write node %s's minute: %w", name, err)
		}
	}
	oldest := minute.Add(time.Minute - Keep).Unix()
	if _, err := tx.ExecContext(ctx, `DELETE FROM model_minutes WHERE minute < ?`, oldest); err != nil {
		return fmt.Errorf("prune the models' minutes: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM node_minutes WHERE minute < ?`, oldest); err != nil {
		return fmt.Errorf("prune the nodes' minutes: %w", err)
	}
	return tx.Commit()
}

// trim drops from each series the minutes that began before since, and
// the series left empty.
func trim[T any](series map[string][]T, at func(T) time.Time, since time.Time) {
	for name, s := range series {
		i := sort.Search(len(s), func(i int) bool { return !at(s[i]).Before(since) })
		if i == len(s) {
			delete(series, name)
			continue
		}
		series[name] = append([]T(nil), s[i:]...)
	}
}

// Hour is the last Window of every model and node, each series oldest
// first and ending with the minute in progress.
type Hour struct {
	Models map[string][]ModelMinute
	Nodes  map[string][]NodeMinute
	// Start and End bound the window: from the start of the minute an
	// hour before the minute in progress to that minute's end.
	Start, End time.Time
}

// Hour is the last hour as of now: the minutes written, and the minute in
// progress as counted so far (the models') or as it stands (the nodes').
func (r *Recorder) Hour() Hour {
	now := r.d.Now()
	minute := now.Truncate(time.Minute).UTC()
	var traffic map[string]gateway.Traffic
	if r.d.Gateway != nil {
		traffic = r.d.Gateway.Traffic()
	}
	nodes := r.nodesNow(minute)
	// The window moves a minute at a time, so a chart drawn again within
	// the minute puts its points where they were.
	h := Hour{Models: map[string][]ModelMinute{}, Nodes: map[string][]NodeMinute{}, Start: minute.Add(-Window), End: minute.Add(time.Minute)}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, s := range r.models {
		h.Models[name] = within(s, func(m ModelMinute) time.Time { return m.Minute }, h.Start)
	}
	for name, m := range r.meters {
		cur := modelMinute(minute, m.Read(), traffic[name])
		cur.Partial = true
		h.Models[name] = append(h.Models[name], cur)
	}
	for name, s := range r.nodes {
		h.Nodes[name] = within(s, func(n NodeMinute) time.Time { return n.Minute }, h.Start)
	}
	for name, n := range nodes {
		n.Partial = true
		h.Nodes[name] = append(h.Nodes[name], n)
	}
	return h
}

// within is a copy of the minutes of s that began at or after since.
func within[T any](s []T, at func(T) time.Time, since time.Time) []T {
	i := sort.Search(len(s), func(i int) bool { return !at(s[i]).Before(since) })
	return append([]T(nil), s[i:]...)
}

package store

import (
	"context"
	"database/sql/driver"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mattn/go-sqlite3"
)

// SQLite lets one connection write at a time. A connection that finds the
// write lock taken sleeps and tries again (busy_timeout), up to 100 ms at a
// time, and whoever asks in the moment the lock is let go takes it: under
// many writers one can lose every time and fail with "database is locked"
// after the whole timeout, while the others write on. Twenty jobs started
// at once on a busy machine did that to the starts of some of them.
//
// So modelserve's own writers queue in Go for the write lock, in the order
// they asked for it, and each takes it the moment the one before lets it
// go: a gate, held by a transaction from its BEGIN (which takes the write
// lock: _txlock=immediate) to its end, and by a statement outside a
// transaction while it runs. Reads outside a transaction do not queue; WAL
// lets them read beside a writer. busy_timeout stays for other processes.

// gateWait is the longest a writer waits for the gate before it is told
// the database is busy: the writes ahead of it each take milliseconds, so
// a minute is a write that never ended, or a goroutine that holds a
// transaction and writes outside it.
const gateWait = time.Minute

// gate is one database's write lock, as its writers queue for it, how
// long they waited for it, and the longest any held it.
type gate struct {
	slot   chan struct{}
	waited waits
	// since is when the writer in the gate entered it: written and read
	// by that writer alone, between its enter and its leave.
	since time.Time
	// longestHold is the longest a writer held the gate, in nanoseconds:
	// how long the writers behind it could have waited for one.
	longestHold atomic.Int64
}

func newGate() *gate { return &gate{slot: make(chan struct{}, 1)} }

// enter waits for the gate, in turn, for at most gateWait or until ctx
// ends.
func (g *gate) enter(ctx context.Context) error {
	select {
	case g.slot <- struct{}{}:
		g.waited.add(0)
		g.since = time.Now()
		return nil
	default:
	}
	start := time.Now()
	t := time.NewTimer(gateWait)
	defer t.Stop()
	select {
	case g.slot <- struct{}{}:
		g.since = time.Now()
		g.waited.add(g.since.Sub(start))
		return nil
	case <-ctx.Done():
		g.waited.add(time.Since(start))
		return ctx.Err()
	case <-t.C:
		g.waited.add(gateWait)
		return fmt.Errorf("the database stayed busy with another write for %v", gateWait)
	}
}

func (g *gate) leave() {
	held := int64(time.Since(g.since))
	for {
		m := g.longestHold.Load()
		if held <= m || g.longestHold.CompareAndSwap(m, held) {
			break
		}
	}
	<-g.slot
}

// connector opens the database's connections, each behind its gate.
type connector struct {
	dsn  string
	gate *gate
}

func (c *connector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.Driver().Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &gatedConn{conn: conn.(*sqlite3.SQLiteConn), gate: c.gate}, nil
}

// Driver is SQLite's, carrying the gate, so that WriteWaitsOf can find a
// database's gate from the *sql.DB alone.
func (c *connector) Driver() driver.Driver { return &gatedDriver{gate: c.gate} }

type gatedDriver struct {
	sqlite3.SQLiteDriver
	gate *gate
}

// gatedConn is a connection whose writes pass through its database's gate.
// database/sql uses a connection from one goroutine at a time, so inTx
// needs no lock of its own.
type gatedConn struct {
	conn *sqlite3.SQLiteConn
	gate *gate
	inTx bool
}

func (c *gatedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if opts.ReadOnly {
		return c.beginRead(ctx)
	}
	if err := c.gate.enter(ctx); err != nil {
		return nil, err
	}
	tx, err := c.conn.BeginTx(ctx, opts)
	if err != nil {
		c.gate.leave()
		return nil, err
	}
	c.inTx = true
	return &gatedTx{tx: tx, conn: c}, nil
}

// beginRead begins a transaction that only reads ({ReadOnly: true}): a
// snapshot of several tables at once. It neither queues at the gate nor
// takes the write lock (BEGIN DEFERRED, whatever _txlock says), so under
// many writers a list read in one transaction waits for none of them and
// holds none of them up; WAL gives it the database as it stood at its
// first read. query_only makes a write in it fail at once rather than
// wait for the lock it never took.
func (c *gatedConn) beginRead(ctx context.Context) (driver.Tx, error) {
	if _, err := c.conn.ExecContext(ctx, `BEGIN DEFERRED`, nil); err != nil {
		return nil, err
	}
	if _, err := c.conn.ExecContext(ctx, `PRAGMA query_only = 1`, nil); err != nil {
		c.conn.ExecContext(context.Background(), `ROLLBACK`, nil)
		return nil, err
	}
	c.inTx = true
	return &readTx{conn: c}, nil
}

// readTx is a read-only transaction: it ends without the gate.
type readTx struct{ conn *gatedConn }

func (t *readTx) Commit() error   { return t.end(`COMMIT`) }
func (t *readTx) Rollback() error { return t.end(`ROLLBACK`) }

func (t *readTx) end(stmt string) error {
	t.conn.inTx = false
	_, err := t.conn.conn.ExecContext(context.Background(), stmt, nil)
	if _, qerr := t.conn.conn.ExecContext(context.Background(), `PRAGMA query_only = 0`, nil); err == nil {
		err = qerr
	}
	return err
}

func (c *gatedConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// exec runs a statement, by run; outside a transaction, in the gate.
func (c *gatedConn) exec(ctx context.Context, run func() (driver.Result, error)) (driver.Result, error) {
	if !c.inTx {
		if err := c.gate.enter(ctx); err != nil {
			return nil, err
		}
		defer c.gate.leave()
	}
	return run()
}

// query runs query, by run; outside a transaction, one that may write
// (anything but a SELECT: UPDATE ... RETURNING, a pragma) holds the gate
// until its rows are closed, since SQLite writes as they are read.
func (c *gatedConn) query(ctx context.Context, query string, run func() (driver.Rows, error)) (driver.Rows, error) {
	if c.inTx || reads(query) {
		return run()
	}
	if err := c.gate.enter(ctx); err != nil {
		return nil, err
	}
	rows, err := run()
	if err != nil {
		c.gate.leave()
		return nil, err
	}
	return &gatedRows{Rows: rows, leave: sync.OnceFunc(c.gate.leave)}, nil
}

func (c *gatedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return c.exec(ctx, func() (driver.Result, error) { return c.conn.ExecContext(ctx, query, args) })
}

func (c *gatedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return c.query(ctx, query, func() (driver.Rows, error) { return c.conn.QueryContext(ctx, query, args) })
}

func (c *gatedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	st, err := c.conn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &gatedStmt{Stmt: st, conn: c, query: query}, nil
}

func (c *gatedConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *gatedConn) Ping(ctx context.Context) error { return c.conn.Ping(ctx) }

func (c *gatedConn) Close() error { return c.conn.Close() }

// reads says whether query is a SELECT, which reads only.
func reads(query string) bool {
	q := strings.TrimLeft(query, " \t\r\n")
	return len(q) >= 6 && strings.EqualFold(q[:6], "SELECT")
}

// gatedTx lets the gate go when its transaction ends, however it ends.
type gatedTx struct {
	tx   driver.Tx
	conn *gatedConn
}

func (t *gatedTx) Commit() error {
	defer t.end()
	return t.tx.Commit()
}

func (t *gatedTx) Rollback() error {
	defer t.end()
	return t.tx.Rollback()
}

func (t *gatedTx) end() {
	t.conn.inTx = false
	t.conn.gate.leave()
}

// gatedStmt is a prepared statement run, outside a transaction, in the
// gate as its connection's statements are.
type gatedStmt struct {
	driver.Stmt
	conn  *gatedConn
	query string
}

func (s *gatedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.conn.exec(ctx, func() (driver.Result, error) { return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args) })
}

func (s *gatedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.conn.query(ctx, s.query, func() (driver.Rows, error) { return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args) })
}

// gatedRows lets the gate go when its rows are closed.
type gatedRows struct {
	driver.Rows
	leave func()
}

func (r *gatedRows) Close() error {
	defer r.leave()
	return r.Rows.Close()
}

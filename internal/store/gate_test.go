package store

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// TestAWriteIsNotStarvedByABusyWriter: one goroutine writes in
// transactions back to back, each holding the write lock 20 ms; another
// writes once meanwhile, as a job's start does beside running jobs. It
// gets its turn after the transaction under way, not a "database is
// locked" five seconds later: SQLite's own wait sleeps between tries, and
// the busy writer took the lock again each time in between.
func TestAWriteIsNotStarvedByABusyWriter(t *testing.T) {
	db := openWithTable(t, `CREATE TABLE t (who TEXT, n INTEGER)`)
	ctx := context.Background()

	var stop atomic.Bool
	busy := make(chan error, 1)
	go func() {
		// Bounded: it stops when the other write is done, or after
		// longer than SQLite's own wait.
		deadline := time.Now().Add(7 * time.Second)
		for n := 0; !stop.Load() && time.Now().Before(deadline); n++ {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				busy <- err
				return
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO t VALUES ('busy', ?)`, n)
			time.Sleep(20 * time.Millisecond)
			if err == nil {
				err = tx.Commit()
			} else {
				tx.Rollback()
			}
			if err != nil {
				busy <- err
				return
			}
		}
		busy <- nil
	}()

	// Once the busy writer is under way.
	for {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM t`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	_, err := db.ExecContext(ctx, `INSERT INTO t VALUES ('once', 0)`)
	took := time.Since(start)
	stop.Store(true)
	if err != nil {
		t.Fatalf("a write beside a busy writer failed after %v: %v", took, err)
	}
	if took > time.Second {
		t.Errorf("a write beside a busy writer took %v; the busy writer's transactions take 20 ms", took)
	}
	if err := <-busy; err != nil {
		t.Errorf("the busy writer: %v", err)
	}
}

// TestAWriteWaitingItsTurnEndsWithItsContext: a write queued behind a
// transaction that does not end gives up when its caller does, and the
// database writes again once the transaction ends.
func TestAWriteWaitingItsTurnEndsWithItsContext(t *testing.T) {
	db := openWithTable(t, `CREATE TABLE t (n INTEGER)`)
	bg := context.Background()
	tx, err := db.BeginTx(bg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	if _, err := db.ExecContext(ctx, `INSERT INTO t VALUES (1)`); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a write behind an open transaction, its context ended: %v; want the context's error", err)
	}
	// A prepared write queues the same way.
	st, err := db.PrepareContext(bg, `INSERT INTO t VALUES (3)`)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx2, cancel2 := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel2()
	if _, err := st.ExecContext(ctx2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a prepared write behind an open transaction, its context ended: %v; want the context's error", err)
	}
	// A read does not queue behind the writer.
	var n int
	if err := db.QueryRowContext(bg, `SELECT COUNT(*) FROM t`).Scan(&n); err != nil {
		t.Fatalf("a read beside an open transaction: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(bg, `INSERT INTO t VALUES (2)`); err != nil {
		t.Fatalf("a write after the transaction ended: %v", err)
	}
	if err := db.QueryRowContext(bg, `SELECT COUNT(*) FROM t`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the table has %d rows (%v); want the one written after", n, err)
	}
}

// openWithTable opens a new database, closed when the test ends, with the
// one table create makes.
func openWithTable(t *testing.T, create string) *sql.DB {
	t.Helper()
	db, err := Open(context.Background(), filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.ExecContext(context.Background(), create); err != nil {
		t.Fatal(err)
	}
	return db
}

// TestTheGateTellsHowLongWritesWaited: a write queued behind a
// transaction held 100 ms is counted as having waited about that long,
// the longest so far, in its bucket, and the transaction as the longest
// hold; a write that found the gate free waited nothing. What /metrics
// shows an operator of a busy database.
func TestTheGateTellsHowLongWritesWaited(t *testing.T) {
	db := openWithTable(t, `CREATE TABLE t (n INTEGER)`)
	ctx := context.Background()
	before, ok := WriteWaitsOf(db)
	if !ok {
		t.Fatal("WriteWaitsOf does not know a database Open opened")
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	queued, asking := make(chan error, 1), make(chan struct{})
	go func() {
		close(asking)
		_, err := db.ExecContext(ctx, `INSERT INTO t VALUES (1)`)
		queued <- err
	}()
	// Held 100 ms from the moment the write asks, however late a busy
	// machine runs the goroutine that asks.
	<-asking
	time.Sleep(100 * time.Millisecond)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-queued; err != nil {
		t.Fatal(err)
	}
	after, _ := WriteWaitsOf(db)
	if n := after.Writes - before.Writes; n != 2 {
		t.Errorf("%d writes counted; want 2 (the transaction and the write behind it)", n)
	}
	if after.Longest < 80*time.Millisecond || after.Longest > 2*time.Second {
		t.Errorf("the longest wait is %v; the write waited behind a transaction held 100 ms", after.Longest)
	}
	if after.LongestHold < 100*time.Millisecond || after.LongestHold > 2*time.Second {
		t.Errorf("the longest hold is %v; a transaction held the lock 100 ms", after.LongestHold)
	}
	// Cumulative: the write that found the gate free is within 1 ms;
	// the one behind the transaction only within 500 ms.
	within := func(d time.Duration) uint64 {
		for i, b := range after.Bounds {
			if b == d {
				return after.Within[i] - before.Within[i]
			}
		}
		t.Fatalf("no bucket bounded at %v", d)
		return 0
	}
	if got := within(time.Millisecond); got != 1 {
		t.Errorf("%d writes within 1 ms; want the one that found the gate free", got)
	}
	if got := within(500 * time.Millisecond); got != 2 {
		t.Errorf("%d writes within 500 ms; want both", got)
	}
	plain, err := sql.Open("sqlite3", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, ok := WriteWaitsOf(plain); ok {
		t.Error("WriteWaitsOf claims a database Open did not open")
	}
}

// TestAReadOnlyTransactionDoesNotQueueBehindWriters: a transaction begun
// read-only (a list read as one snapshot) goes ahead while a write
// transaction holds the gate, sees the database as committed, and cannot
// write; the writer commits beside it.
func TestAReadOnlyTransactionDoesNotQueueBehindWriters(t *testing.T) {
	db := openWithTable(t, `CREATE TABLE t (n INTEGER)`)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	w, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Rollback()
	if _, err := w.ExecContext(ctx, `INSERT INTO t VALUES (2)`); err != nil {
		t.Fatal(err)
	}

	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	r, err := db.BeginTx(rctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("a read-only transaction beside an open write: %v; want it begun at once", err)
	}
	var n int
	if err := r.QueryRowContext(rctx, `SELECT COUNT(*) FROM t`).Scan(&n); err != nil || n != 1 {
		t.Errorf("the read-only transaction sees %d rows (%v); want the 1 committed", n, err)
	}
	if _, err := r.ExecContext(rctx, `INSERT INTO t VALUES (3)`); err == nil {
		t.Error("a read-only transaction wrote")
	}
	if err := r.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err != nil {
		t.Fatalf("the writer beside the read: %v", err)
	}
	// The connection the read used writes again afterwards.
	for range 4 {
		if _, err := db.ExecContext(ctx, `INSERT INTO t VALUES (4)`); err != nil {
			t.Fatalf("a write after the read-only transaction: %v", err)
		}
	}
}

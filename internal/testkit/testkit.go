// Package testkit is what tests of several packages share beyond a log
// buffer (testlog): waiting for a condition with a bound, stepping a fake
// clock until the code under test waits again, and a test database. Each
// test package kept its own wait loop, with three signatures, some that
// could not say what they last saw, and about twenty copies of "open a
// database in a temporary folder, migrated, closed at the end".
package testkit

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"modelserve/internal/store"
)

// WaitFor looks again soon at first, then less and less often, up to
// pollMost apart: most conditions hold within milliseconds, and a wait of
// minutes (an engine loading, a job running) asks a server or a cluster
// twenty times a second, not two hundred. Step and WaitWaiters look
// sooner, up to clockMost apart: a test may step a clock hundreds of
// times, and the code it wakes sets its next timer within microseconds.
const (
	pollFirst, pollMost   = time.Millisecond, 50 * time.Millisecond
	clockFirst, clockMost = 20 * time.Microsecond, time.Millisecond
)

// clockWithin bounds how long Step and WaitWaiters wait for the code on
// the clock to wait.
var clockWithin = 5 * time.Second

// WaitFor polls cond until it holds, for something no event says. Past
// within, it fails the test (Fatal: call it from the test's goroutine)
// saying what it waited for and what cond last saw, the second value cond
// returns.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() (ok bool, saw string)) {
	t.Helper()
	poll(t, within, pollFirst, pollMost, what, cond)
}

// WaitForValue is WaitFor for a value the test goes on to use: it polls
// get until it says ok, and returns the value it gave then. Past within,
// it fails the test showing the last value (%+v).
func WaitForValue[T any](t testing.TB, within time.Duration, what string, get func() (v T, ok bool)) T {
	t.Helper()
	var v T
	poll(t, within, pollFirst, pollMost, what, func() (bool, string) {
		var ok bool
		if v, ok = get(); ok {
			return true, ""
		}
		return false, fmt.Sprintf("%+v", v)
	})
	return v
}

// poll is WaitFor, looking again first after a while of every, then
// after twice the last while, up to most.
func poll(t testing.TB, within, every, most time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last seen: %s", what, within, saw)
		}
		time.Sleep(every)
		every = min(2*every, most)
	}
}

// Step moves c on by d, then waits (clockWithin, 5 s) until waiters timers
// are set on it again: the code it woke has done what the time passing
// made it do, and waits anew. A test that steps the clock thus sees, at
// once and for certain, what a sleep of d could only have made likely.
func Step(t testing.TB, c *clocktesting.FakeClock, d time.Duration, waiters int) {
	t.Helper()
	c.Step(d)
	poll(t, clockWithin, clockFirst, clockMost, "the code on the clock waiting again after a step of "+d.String(), func() (bool, string) {
		n := c.Waiters()
		return n >= waiters, "timers set: " + strconv.Itoa(n) + ", want " + strconv.Itoa(waiters)
	})
}

// WaitWaiters waits (clockWithin, 5 s) until waiters timers are set on c: the
// code under test has come to its wait.
func WaitWaiters(t testing.TB, c *clocktesting.FakeClock, waiters int) {
	t.Helper()
	poll(t, clockWithin, clockFirst, clockMost, "the code on the clock waiting", func() (bool, string) {
		n := c.Waiters()
		return n >= waiters, "timers set: " + strconv.Itoa(n) + ", want " + strconv.Itoa(waiters)
	})
}

// OpenDB is a new modelserve database in the test's temporary folder,
// migrated, closed when the test ends.
func OpenDB(t testing.TB) *sql.DB {
	t.Helper()
	return OpenDBFile(t, filepath.Join(t.TempDir(), "modelserve.db"))
}

// OpenDBFile opens the database in file (made and migrated if new), as
// modelserve opens its data folder's: a test reads or changes what a
// stopped server left there. It is closed when the test ends, or before
// by the test (closing twice does no harm).
func OpenDBFile(t testing.TB, file string) *sql.DB {
	t.Helper()
	db, err := store.Open(context.Background(), file)
	if err != nil {
		t.Fatalf("open the database: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

package fleet

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/ggufgen"
	"modelserve/internal/testkit"
)

// adoptFleets is a fleet recording its engines in a database, its tiny
// model ready and its Run ended (its engine left running), and a
// function to run another fleet over the same database and node, as the
// next modelserve on the same data folder.
func adoptFleets(t *testing.T, opts Options) (first *testFleet, ready Replica, db *sql.DB, again func() *testFleet) {
	t.Helper()
	db = testkit.OpenDB(t)
	cat := catalog.NewStore(db)
	node := MustLocalNode(t, LocalConfig{})
	opts.Nodes, opts.Engines = []Node{node}, NewEngines(db, t.TempDir())
	first = MustRun(t, cat, opts)
	MustAdd(t, first.notifying(cat), entry("tiny", MustWriteModel(t, "tiny.gguf", ggufgen.Spec{}), 1))
	ready = first.waitReady(t, "tiny", readyWithin)
	first.stop(t)
	return first, ready, db, func() *testFleet { return MustRun(t, cat, opts) }
}

// recordedPIDs are the pids of the engines recorded, by replica.
func recordedPIDs(t *testing.T, db *sql.DB) map[string]int {
	t.Helper()
	recs, err := (&Engines{db: db}).list(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, r := range recs {
		out[r.Replica] = r.PID
	}
	return out
}

// A fleet's Run ends and leaves its engine running, its last view still
// answering; the next fleet over the same database takes the engine back
// as it is: the same process, ready at once, answering with no reload.
func TestAdoptsTheEngineLeftRunning(t *testing.T) {
	first, was, _, again := adoptFleets(t, Options{})
	if s := first.Serving("tiny"); len(s) != 1 || s[0].Endpoint != was.Endpoint {
		t.Errorf("after Run ended the fleet serves tiny on %+v, want its replica at %s still", s, was.Endpoint)
	}
	if code, body := chat(t, was.Endpoint, first.EngineKey(was.ID), "tiny"); code != 200 {
		t.Fatalf("the engine left running answers %d: %s", code, body)
	}

	start := time.Now()
	second := again()
	var got Replica
	testkit.WaitFor(t, 10*time.Second, "tiny adopted and ready", func() (bool, string) {
		for _, r := range second.Replicas() {
			if r.Model == "tiny" && r.State == Ready {
				got = r
				return true, ""
			}
		}
		return false, "not yet"
	})
	code, body := chat(t, got.Endpoint, second.EngineKey(got.ID), "tiny")
	took := time.Since(start)
	t.Logf("from Run to the first answer of the adopted engine: %s (goal: under 1 s)", took)
	if code != 200 {
		t.Fatalf("the adopted engine answers %d: %s", code, body)
	}
	if got.PID != was.PID || got.ID != was.ID {
		t.Errorf("the second fleet serves tiny with %s (pid %d), want the engine left running, %s (pid %d)", got.ID, got.PID, was.ID, was.PID)
	}
	if n := len(second.node.started()); n != 1 {
		t.Errorf("%d engines were started over both fleets, want the first alone: the adopted one was loaded again", n)
	}
	if took > 5*time.Second {
		t.Errorf("the adopted engine answered %s after Run began: it waited for something", took)
	}
	// Its load was read at adoption: the gateway sends it as many
	// requests as it serves at once.
	second.mustSync(t)
	if got.Load == nil || got.Load.Size.Slots != 1 {
		t.Errorf("the adopted replica's load is %+v, want its engine's slot", got.Load)
	}
}

// An engine that died while modelserve was down is not adopted: its
// model is started afresh, in a new engine.
func TestEngineDeadMeanwhileIsStartedAfresh(t *testing.T) {
	first, was, db, again := adoptFleets(t, Options{})
	first.node.procs[0].Stop(0)
	second := again()
	got := second.waitReady(t, "tiny", readyWithin)
	if got.PID == was.PID {
		t.Fatalf("tiny is served by pid %d, the engine that died", got.PID)
	}
	if code, body := chat(t, got.Endpoint, second.EngineKey(got.ID), "tiny"); code != 200 {
		t.Fatalf("the fresh engine answers %d: %s", code, body)
	}
	if pids := recordedPIDs(t, db); pids[got.ID] != got.PID || len(pids) != 1 {
		t.Errorf("the records are %v, want %s's new engine (pid %d) alone", pids, got.ID, got.PID)
	}
}

// A record whose pid is another process now (here a sleep, its pid
// written into the record) is dropped: that process is neither adopted
// nor signalled, and the model gets an engine of its own.
func TestRecordOfAnotherProcessIsNotAdopted(t *testing.T) {
	first, was, db, again := adoptFleets(t, Options{})
	first.node.procs[0].Stop(0)
	sleep := exec.Command("sleep", "120")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleep.Process.Kill(); _ = sleep.Wait() })
	exited := make(chan struct{})
	go func() { _, _ = sleep.Process.Wait(); close(exited) }()
	if _, err := db.Exec(`UPDATE running_engines SET pid = ? WHERE replica = ?`, sleep.Process.Pid, was.ID); err != nil {
		t.Fatal(err)
	}

	second := again()
	got := second.waitReady(t, "tiny", readyWithin)
	if got.PID == sleep.Process.Pid {
		t.Fatalf("tiny's replica %s was adopted as pid %d, the sleep", got.ID, got.PID)
	}
	select {
	case <-exited:
		t.Fatalf("the sleep whose pid was in the record was killed (%v)", sleep.ProcessState)
	case <-time.After(200 * time.Millisecond):
	}
	if err := syscall.Kill(sleep.Process.Pid, 0); errors.Is(err, syscall.ESRCH) {
		t.Fatal("the sleep whose pid was in the record is gone")
	}
	if pids := recordedPIDs(t, db); pids[got.ID] != got.PID || len(pids) != 1 {
		t.Errorf("the records are %v, want %s's new engine (pid %d) alone", pids, got.ID, got.PID)
	}
}

// An engine of ours that does not answer /health (stopped with SIGSTOP:
// hung) is not trusted: it is stopped, and its model started afresh.
func TestHungEngineIsStoppedNotAdopted(t *testing.T) {
	_, was, _, again := adoptFleets(t, Options{StopGrace: 500 * time.Millisecond})
	if err := syscall.Kill(was.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	second := again()
	got := second.waitReady(t, "tiny", readyWithin)
	if got.PID == was.PID {
		t.Fatalf("the hung engine (pid %d) was adopted", was.PID)
	}
	testkit.WaitFor(t, 10*time.Second, "the hung engine stopped", func() (bool, string) {
		_, alive := identify(was.PID)
		return !alive, "still there"
	})
}

// With StopEnginesOnExit the engines end with Run, and nothing is left
// recorded.
func TestStopEnginesOnExit(t *testing.T) {
	first, _, db, _ := adoptFleets(t, Options{StopEnginesOnExit: true})
	assertGone(t, first.node.started())
	if pids := recordedPIDs(t, db); len(pids) != 0 {
		t.Errorf("after Run ended the records are %v, want none", pids)
	}
	if s := first.Serving("tiny"); len(s) != 0 {
		t.Errorf("after Run ended with its engines the fleet still serves tiny on %+v", s)
	}
}

// An engine left mid-load (a handover while it read its weights) answers
// /health 503 until it has loaded: it is waited for and adopted, the same
// process, rather than stopped as failing and loaded again from the start.
func TestEngineStillLoadingIsWaitedFor(t *testing.T) {
	_, was, db, again := adoptFleets(t, Options{StopGrace: 500 * time.Millisecond})
	// The record points at a relay that says what llama-server says while
	// it loads, for a second, then passes every request to the engine.
	target, err := url.Parse(was.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	loadedAt := time.Now().Add(time.Second)
	var loadingAnswers atomic.Int32
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" && time.Now().Before(loadedAt) {
			loadingAnswers.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(relay.Close)
	if _, err := db.Exec(`UPDATE running_engines SET endpoint = ? WHERE replica = ?`, relay.URL, was.ID); err != nil {
		t.Fatal(err)
	}

	second := again()
	got := second.waitReady(t, "tiny", readyWithin)
	if got.PID != was.PID {
		t.Fatalf("tiny runs on pid %d, want the engine that was loading (pid %d) adopted once loaded", got.PID, was.PID)
	}
	if loadingAnswers.Load() == 0 {
		t.Fatal("the relay never said the engine was loading: the test tested nothing")
	}
	if _, alive := identify(was.PID); !alive {
		t.Errorf("the engine that was loading (pid %d) was stopped", was.PID)
	}
}

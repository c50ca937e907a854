package fleet

import (
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/ggufgen"
	"modelserve/internal/testkit"
	"modelserve/internal/testlog"
)

// TestAStoppedReplicaDrainsFirst: a replica stopped while a request holds
// it leaves Serving at once and is draining, its engine still running and
// answering, and refuses new holds; its engine stops once the request ends.
func TestAStoppedReplicaDrainsFirst(t *testing.T) {
	cat := MustCatalog(t)
	f := MustRun(t, cat, Options{})
	MustAdd(t, f.notifying(cat), entry("tiny", MustWriteModel(t, "tiny.gguf", ggufgen.Spec{}), 1))
	r := f.waitReady(t, "tiny", readyWithin)

	release, ok := f.Hold(r.ID, time.Now())
	if !ok {
		t.Fatalf("a ready replica refused a hold")
	}
	if err := f.Stop(r.ID); err != nil {
		t.Fatal(err)
	}
	rs := f.replicasOf("tiny")
	if len(rs) == 0 || rs[0].ID != r.ID || rs[0].State != Draining || !strings.Contains(rs[0].Detail, "waiting for 1 request in flight") {
		t.Fatalf("after Stop with a request in flight: %+v, want %s draining", rs, r.ID)
	}
	for _, s := range f.Serving("tiny") {
		if s.ID == r.ID {
			t.Errorf("a draining replica is still served: %+v", s)
		}
	}
	if _, ok := f.Hold(r.ID, time.Now()); ok {
		t.Error("a draining replica took a new hold")
	}
	if code, body := chat(t, r.Endpoint, f.EngineKey(r.ID), "tiny"); code != 200 {
		t.Errorf("the draining engine did not answer its request: %d %s", code, body)
	}

	release()
	testkit.WaitFor(t, 20*time.Second, r.ID+"'s engine stopped once drained", func() (bool, string) {
		err := syscall.Kill(r.PID, 0)
		return err == syscall.ESRCH, "kill 0: " + errString(err)
	})
}

// TestADrainIsBounded: a request that never ends does not keep a retired
// replica for ever: past the drain timeout its engine is stopped, and its
// detail says so.
func TestADrainIsBounded(t *testing.T) {
	cat := MustCatalog(t)
	var logs testlog.Buffer
	f := MustRun(t, cat, Options{DrainTimeout: 300 * time.Millisecond, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	m := entry("tiny", MustWriteModel(t, "tiny.gguf", ggufgen.Spec{}), 1)
	MustAdd(t, f.notifying(cat), m)
	r := f.waitReady(t, "tiny", readyWithin)
	if _, ok := f.Hold(r.ID, time.Now()); !ok {
		t.Fatal("a ready replica refused a hold")
	}
	m.Scaling = catalog.Scaling{Min: 0, Max: 1}
	MustAdd(t, f.notifying(cat), m)
	sawDraining := false
	testkit.WaitFor(t, 20*time.Second, r.ID+" stopped past its drain timeout", func() (bool, string) {
		for _, x := range f.Replicas() {
			if x.ID == r.ID {
				sawDraining = sawDraining || x.State == Draining
				return false, string(x.State) + ": " + x.Detail
			}
		}
		return true, ""
	})
	if err := syscall.Kill(r.PID, 0); err != syscall.ESRCH {
		t.Errorf("the engine of %s is still there: %v", r.ID, err)
	}
	if !sawDraining {
		t.Error("the replica was never draining")
	}
	if !strings.Contains(logs.String(), "a draining replica is stopped with requests in flight") {
		t.Errorf("the stop past the drain timeout is not logged:\n%s", logs.String())
	}
}

func errString(err error) string {
	if err == nil {
		return "alive"
	}
	return err.Error()
}

// TestOnStoppingIsToldWhileTheEngineRuns: whoever keeps connections open
// to an engine hears of its stop while it still runs, so that it closes
// them first: llama-server, stopping, waits for each open connection's
// client to close its end.
func TestOnStoppingIsToldWhileTheEngineRuns(t *testing.T) {
	cat := MustCatalog(t)
	f := MustRun(t, cat, Options{})
	MustAdd(t, f.notifying(cat), entry("tiny", MustWriteModel(t, "tiny.gguf", ggufgen.Spec{}), 1))
	r := f.waitReady(t, "tiny", readyWithin)
	type told struct {
		endpoint string
		running  bool
	}
	heard := make(chan told, 4)
	f.OnStopping(func(endpoint string) {
		select { // a listener must not block: the replica started after it stops too
		case heard <- told{endpoint, syscall.Kill(r.PID, 0) == nil}:
		default:
		}
	})
	if err := f.Stop(r.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-heard:
		if h.endpoint != r.Endpoint || !h.running {
			t.Errorf("told of %q stopping, its engine running %v; want %q told while it ran", h.endpoint, h.running, r.Endpoint)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the fleet stopped %s and told nobody", r.ID)
	}
}

// TestAReplicaStoppedAsItSettlesIsToldOnce: a replica stopped the moment
// after it is ready (as a swap gives one back within its settle) has its
// stop told once, its engine stopped once.
func TestAReplicaStoppedAsItSettlesIsToldOnce(t *testing.T) {
	cat := MustCatalog(t)
	f := MustRun(t, cat, Options{})
	var mu sync.Mutex
	tells := map[string]int{}
	f.OnStopping(func(endpoint string) {
		mu.Lock()
		defer mu.Unlock()
		tells[endpoint]++
	})
	stopped := make(chan Replica, 1)
	var once sync.Once
	f.OnReady(func(model string) {
		once.Do(func() {
			go func() { // a listener must not block
				for _, r := range f.replicasOf(model) {
					if r.State == Ready {
						if err := f.Stop(r.ID); err != nil {
							t.Error(err)
						}
						stopped <- r
						return
					}
				}
				t.Error("told of a replica ready, and none is")
				close(stopped)
			}()
		})
	})
	MustAdd(t, f.notifying(cat), entry("tiny", MustWriteModel(t, "tiny.gguf", ggufgen.Spec{}), 1))
	var r Replica
	select {
	case r = <-stopped:
	case <-time.After(readyWithin):
		t.Fatal("no replica became ready")
	}
	testkit.WaitFor(t, 20*time.Second, r.ID+" gone", func() (bool, string) {
		for _, x := range f.replicasOf("tiny") {
			if x.ID == r.ID {
				return false, x.ID + " is " + string(x.State)
			}
		}
		return true, ""
	})
	mu.Lock()
	defer mu.Unlock()
	if tells[r.Endpoint] != 1 {
		t.Fatalf("the stop of %s was told %d times, want once", r.ID, tells[r.Endpoint])
	}
}

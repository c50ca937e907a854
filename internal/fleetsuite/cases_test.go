package fleetsuite_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"modelserve/internal/fleet"
	"modelserve/internal/testkit"
)

// cases are the suite's, each run against every fleet.
var cases = []struct {
	name string
	run  func(t *testing.T, b *backend)
}{
	{"concurrent first requests start one engine", concurrentFirstRequests},
	{"a replica answers its own key, not another model's", ownKeys},
	{"a request through an operator's Stop completes", requestThroughStop},
	{"a stopping replica is never offered", stoppingNeverServed},
	{"a replica restarts when its model's serving changes", restartOnServingChange},
	{"swapping with room for one: each answers in its turn", swapForOne},
	{"a busy replica is never stopped for another model", busyNeverStopped},
	{"a client that gives up costs nothing", givesUpCostsNothing},
	{"the first asked gets room first, and is not starved", arrivalOrder},
	{"0 failed requests through a scale-down", drainScaleDown},
	{"0 failed requests through a promotion", drainPromotion},
	{"the headroom is never promised", headroomNeverPromised},
	{"a critical model takes an opportunistic one's room", criticalTakesRoom},
	{"replicas hold the keys their fleet promises", replicaKeys},
	{"a parked model stays parked across a restart", parksAcrossRestart},
}

// concurrentFirstRequests: clients asking at once for a model nothing
// runs yet are all answered, by the one replica their asking started,
// though the model may run two.
func concurrentFirstRequests(t *testing.T, b *backend) {
	b.serve(t, b.model("first", 0, 2))
	const clients = 6
	answers := make([]answer, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = b.ask(t, "first", 4)
		}()
	}
	// Every replica the model has while they wait, in any state.
	seen := map[string]bool{}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for watching := true; watching; {
		select {
		case <-done:
			watching = false
		case <-time.After(20 * time.Millisecond):
		}
		for _, r := range b.replicas("first") {
			seen[r.ID] = true
		}
	}
	for i, a := range answers {
		if !a.ok() {
			t.Errorf("client %d was answered %s", i, a)
		}
	}
	if len(seen) != 1 {
		t.Errorf("%d concurrent first requests started %d replicas (%v), want one", clients, len(seen), seen)
	}
}

// ownKeys: a replica answers its own key, and refuses another model's
// and none: a key leaks no further than its replicas.
func ownKeys(t *testing.T, b *backend) {
	b.serve(t, b.model("alpha", 1, 1))
	b.serve(t, b.model("beta", 1, 1))
	alpha, beta := b.ready(t, "alpha", 1)[0], b.ready(t, "beta", 1)[0]
	ka, kb := b.fleet.EngineKey(alpha.ID), b.fleet.EngineKey(beta.ID)
	if ka == "" || kb == "" || ka == kb {
		t.Fatalf("the replicas' keys %q and %q, want two different keys", ka, kb)
	}
	for _, c := range []struct {
		r      string
		a      answer
		status int
	}{
		{"alpha with its key", b.send(alpha, ka, 2), http.StatusOK},
		{"beta with its key", b.send(beta, kb, 2), http.StatusOK},
		{"alpha with beta's key", b.send(alpha, kb, 2), http.StatusUnauthorized},
		{"beta with alpha's key", b.send(beta, ka, 2), http.StatusUnauthorized},
		{"alpha with no key", b.send(alpha, "", 2), http.StatusUnauthorized},
	} {
		if c.a.err != nil || c.a.status != c.status {
			t.Errorf("%s: %s, want %d", c.r, c.a, c.status)
		}
	}
}

// stoppingNeverServed: from the moment an operator's Stop returns, the
// replica is never offered to a request again, nor held for one that
// chose it just before, while the model goes on being served by another.
func stoppingNeverServed(t *testing.T, b *backend) {
	b.serve(t, b.model("steady", 1, 1))
	old := b.ready(t, "steady", 1)[0]
	var mu sync.Mutex
	var told []string
	b.fleet.OnStopping(func(endpoint string) {
		mu.Lock()
		told = append(told, endpoint)
		mu.Unlock()
	})
	if err := b.fleet.Stop(old.ID); err != nil {
		t.Fatalf("Stop(%s): %v", old.ID, err)
	}
	// A request that chose it from Serving a moment before is not sent
	// to it.
	if release, ok := b.fleet.Hold(old.ID, time.Now()); ok {
		release()
		t.Errorf("the stopped replica %s is held for a request after its Stop returned", old.ID)
	}
	testkit.WaitFor(t, 3*time.Minute, "a new replica of steady to be served", func() (bool, string) {
		served := b.fleet.Serving("steady")
		for _, r := range served {
			if r.ID == old.ID {
				t.Fatalf("the stopped replica %s is offered after its Stop returned: %+v", old.ID, r)
			}
		}
		return len(served) == 1, fmt.Sprint(b.replicas("steady"))
	})
	if a := b.ask(t, "steady", 4); !a.ok() || a.replica == old.ID {
		t.Errorf("a client after the stop was answered %s, want the new replica's answer", a)
	}
	testkit.WaitFor(t, time.Minute, "the gateway to be told the stopped replica's endpoint", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(told, old.Endpoint), fmt.Sprint(told)
	})
}

// answerTokens is how long the answer written through a stop is: seconds
// of the tiny model's writing, within the 4096 tokens it was trained for,
// which bound its slot.
const answerTokens = 3500

// requestThroughStop: a long answer being written when an operator stops
// its replica is written whole, and clients asking meanwhile are all
// answered: 0 failed.
func requestThroughStop(t *testing.T, b *backend) {
	b.serve(t, b.model("drained", 1, 1))
	long := b.streamOn(t, b.ready(t, "drained", 1)[0])
	if err := b.fleet.Stop(long.replica.ID); err != nil {
		t.Fatalf("Stop(%s): %v", long.replica.ID, err)
	}
	var others []answer
	for range 3 {
		others = append(others, b.ask(t, "drained", 4))
	}
	long.whole(t)
	for i, o := range others {
		if !o.ok() {
			t.Errorf("client %d, asking during the stop, was answered %s", i, o)
		}
	}
}

// restartOnServingChange: a model served with other settings runs them:
// its replica is replaced by one started with them, which answers.
func restartOnServingChange(t *testing.T, b *backend) {
	m := b.model("changing", 1, 1)
	b.serve(t, m)
	old := b.ready(t, "changing", 1)[0]
	if got := slots(t, b, old); got != 2 {
		t.Fatalf("the replica runs %d slots, want the profile's 2", got)
	}
	m.Profiles[0].Slots = 1
	b.catalog.Put(m)
	b.fleet.Poke()
	var now fleet.Replica
	testkit.WaitFor(t, 90*time.Second, "a new replica of changing with its new settings", func() (bool, string) {
		served := b.fleet.Serving("changing")
		if len(served) == 1 && served[0].ID != old.ID {
			now = served[0]
			return true, ""
		}
		return false, fmt.Sprint(b.replicas("changing"))
	})
	if got := slots(t, b, now); got != 1 {
		t.Errorf("the replica after the change runs %d slots, want the new 1", got)
	}
	if a := b.ask(t, "changing", 4); !a.ok() {
		t.Errorf("a client after the change was answered %s", a)
	}
}

// slots is how many requests at once replica r's engine serves, as it
// says itself.
func slots(t *testing.T, b *backend, r fleet.Replica) int {
	t.Helper()
	a := request(r, "GET", "/props", b.fleet.EngineKey(r.ID), "")
	var props struct {
		TotalSlots int `json:"total_slots"`
	}
	if !a.ok() || json.Unmarshal([]byte(a.body), &props) != nil {
		t.Fatalf("replica %s's /props: %s", r.ID, a)
	}
	return props.TotalSlots
}

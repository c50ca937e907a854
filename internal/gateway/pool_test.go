package gateway

import (
	"context"
	"fmt"
	"modelserve/catalog"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"modelserve/internal/fleet"
	"modelserve/internal/ggufgen"
	"modelserve/internal/testkit"
)

func replicas(n, slots int) []fleet.Replica {
	out := make([]fleet.Replica, n)
	for i := range out {
		out[i] = fleet.Replica{ID: fmt.Sprintf("m-%d", i+1), Load: &fleet.Load{Size: catalog.Size{Slots: slots}}}
	}
	return out
}

func keyOf(t *testing.T, body string) uint64 {
	t.Helper()
	req, aerr := parseRequest([]byte(body))
	if aerr != nil {
		t.Fatal(aerr)
	}
	return req.affinity
}

func TestAffinityKeepsAConversationOnItsReplica(t *testing.T) {
	system := strings.Repeat("You are the assistant of tenant 7. ", 100)
	turn1 := `{"model":"m","messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"hi"}]}`
	turn2 := `{"model":"m","messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"hi"},` +
		`{"role":"assistant","content":"hello"},{"role":"user","content":"and now?"}]}`
	other := `{"model":"m","messages":[{"role":"system","content":"You serve tenant 8."},{"role":"user","content":"hi"}]}`
	k1, k2, k3 := keyOf(t, turn1), keyOf(t, turn2), keyOf(t, other)
	if k1 == 0 || k1 != k2 {
		t.Errorf("two turns of one conversation hash apart: %x %x", k1, k2)
	}
	if k3 == k1 {
		t.Error("another tenant's system prompt hashes the same")
	}
	if keyOf(t, `{"model":"m","input":"embed me"}`) != 0 {
		t.Error("an embedding request has an affinity key")
	}
	if keyOf(t, `{"model":"m","prompt":"`+system+`"}`) == 0 {
		t.Error("a completion prompt has no affinity key")
	}

	// Idle replicas: the same key picks the same one, whatever the order
	// the fleet lists them in, and keys spread over all of them.
	p := newPool(nil, clock.RealClock{})
	rs := replicas(4, 4)
	first, _ := p.pick(rs, k1, time.Now())
	reversed := []fleet.Replica{rs[3], rs[2], rs[1], rs[0]}
	if again, _ := p.pick(reversed, k1, time.Now()); again.ID != first.ID {
		t.Errorf("the same key went to %s, then %s", first.ID, again.ID)
	}
	used := map[string]int{}
	for i := range 64 {
		r, _ := p.pick(rs, keyOf(t, fmt.Sprintf(`{"model":"m","messages":[{"role":"system","content":"tenant %d"}]}`, i)), time.Now())
		used[r.ID]++
	}
	if len(used) != 4 {
		t.Errorf("64 tenants over 4 replicas used %v", used)
	}

	// Losing a replica moves only the keys that were on it.
	moved := 0
	for i := range 64 {
		k := keyOf(t, fmt.Sprintf(`{"model":"m","messages":[{"role":"system","content":"tenant %d"}]}`, i))
		before, _ := p.pick(rs, k, time.Now())
		after, _ := p.pick(rs[:3], k, time.Now())
		if before.ID != "m-4" && before.ID != after.ID {
			moved++
		}
	}
	if moved != 0 {
		t.Errorf("%d keys moved off replicas that stayed", moved)
	}
}

func TestPickBoundsTheLoad(t *testing.T) {
	p := newPool(nil, clock.RealClock{})
	rs := replicas(4, 8)
	key := keyOf(t, `{"model":"m","messages":[{"role":"system","content":"one hot tenant"}]}`)
	home, _ := p.pick(rs, key, time.Now())

	// The hot tenant's requests stay home until it holds clearly more
	// than its share, then spill to the least loaded.
	placed := map[string]int{}
	for range 16 {
		r, ok := p.pick(rs, key, time.Now())
		if !ok {
			t.Fatal("no replica for a request while slots are free")
		}
		p.take(r.ID)
		placed[r.ID]++
	}
	if placed[home.ID] >= 16 || placed[home.ID] < 4 {
		t.Errorf("16 requests of one tenant: %v (home %s); want most at home, the rest spread", placed, home.ID)
	}
	for id, n := range p.inFlight {
		if limit := 16*affinityLoad/4 + 2; float64(n) > limit {
			t.Errorf("%s holds %d, over the bound %.0f", id, n, limit)
		}
	}

	// Every slot taken, and as many waiting in the engine's queue:
	// nothing to pick, the request waits.
	full := newPool(nil, clock.RealClock{})
	one := replicas(1, 2)
	for range 4 {
		full.take("m-1")
	}
	if r, ok := full.pick(one, key, time.Now()); ok {
		t.Errorf("picked %s with no free slot", r.ID)
	}
	full.give("m-1", time.Time{})
	if _, ok := full.pick(one, key, time.Now()); !ok {
		t.Error("a freed slot is not picked")
	}
}

// TestAffinityWaitsForTheReplicaWithItsPrefix: four one-slot replicas,
// four requests at once. A tenant's replica running one request with one
// waiting is waited for, since its engine holds the tenant's prefix and
// another would read it again; one holding more than the bound and its
// slack is not, and the request goes to the next in its ranking.
func TestAffinityWaitsForTheReplicaWithItsPrefix(t *testing.T) {
	rs := replicas(4, 1)
	key := keyOf(t, `{"model":"m","messages":[{"role":"system","content":"tenant 3's long system prompt"}]}`)
	home, _ := newPool(nil, clock.RealClock{}).pick(rs, key, time.Now())
	other := rs[0]
	if other.ID == home.ID {
		other = rs[1]
	}

	busy := newPool(nil, clock.RealClock{})
	busy.take(home.ID)
	busy.take(home.ID)
	busy.take(other.ID)
	if r, ok := busy.pick(rs, key, time.Now()); ok {
		t.Errorf("with its replica %s running one and holding one more, the tenant went to %s and reads its prefix again; want it to wait", home.ID, r.ID)
	}

	over := newPool(nil, clock.RealClock{})
	for range 3 {
		over.take(home.ID)
	}
	if r, ok := over.pick(rs, key, time.Now()); !ok || r.ID == home.ID {
		t.Errorf("with its replica %s holding 3 of 4 requests: picked %s (%v); want another", home.ID, r.ID, ok)
	}
}

func TestPickAvoidsAReplicaThatFailed(t *testing.T) {
	p := newPool(nil, clock.RealClock{})
	rs := replicas(2, 4)
	key := keyOf(t, `{"model":"m","prompt":"the same prompt"}`)
	home, _ := p.pick(rs, key, time.Now())
	p.take(home.ID)
	p.give(home.ID, time.Now().Add(time.Minute)) // it failed
	if r, _ := p.pick(rs, key, time.Now()); r.ID == home.ID {
		t.Errorf("the failed replica %s was picked while another could serve", r.ID)
	}
	// Alone, it is tried all the same: better than refusing.
	var alone []fleet.Replica
	for _, r := range rs {
		if r.ID == home.ID {
			alone = append(alone, r)
		}
	}
	if r, ok := p.pick(alone, key, time.Now()); !ok || r.ID != home.ID {
		t.Errorf("the only replica, failed a moment ago: %v %v", r.ID, ok)
	}
	// After the cooldown it is home again.
	if r, _ := p.pick(rs, key, time.Now().Add(2*time.Minute)); r.ID != home.ID {
		t.Errorf("after the cooldown: %s, want %s", r.ID, home.ID)
	}
}

func TestPickCountsTheEnginesOwnLoad(t *testing.T) {
	p := newPool(nil, clock.RealClock{})
	rs := replicas(2, 4)
	rs[0].Load.Processing, rs[0].Load.Deferred = 3, 2 // busy with requests from elsewhere
	for range 3 {
		r, _ := p.pick(rs, 0, time.Now())
		if r.ID != "m-2" {
			t.Fatalf("picked %s, busy in its engine's own words", r.ID)
		}
		p.take(r.ID)
	}
}

func TestWantedReplicas(t *testing.T) {
	p := newPool(nil, clock.RealClock{})
	if n := wanted(p, nil); n != 1 {
		t.Errorf("no replica: want %d, not 1", n)
	}
	rs := replicas(1, 2)
	if n := wanted(p, rs); n != 1 {
		t.Errorf("idle: %d", n)
	}
	p.take("m-1")
	p.take("m-1")
	if n := wanted(p, rs); n != 2 {
		t.Errorf("both slots taken and one more asking: %d, want 2", n)
	}
}

func TestRenamedKeepsEveryOtherField(t *testing.T) {
	req, aerr := parseRequest([]byte(`{"model":"alias","messages":[],"n_probs":3,"grammar":"root ::= \"x\"","stream":true}`))
	if aerr != nil {
		t.Fatal(aerr)
	}
	b, err := req.renamed("name")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"model":"name"`, `"n_probs":3`, `"grammar":"root ::= \"x\""`, `"stream":true`, `"messages":[]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("renamed body %s lacks %s", b, want)
		}
	}
	for _, bad := range []string{`[]`, `null`, `{"model":3}`, `{"model":""}`} {
		if _, aerr := parseRequest([]byte(bad)); aerr == nil || aerr.status != 400 {
			t.Errorf("parseRequest(%s): %v, want a 400", bad, aerr)
		}
	}
}

func TestTallyReadsTheCounts(t *testing.T) {
	stream := "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":5},\"timings\":{\"prompt_n\":2,\"cache_n\":10,\"predicted_n\":5}}\n\n" +
		"data: [DONE]\n\n"
	// Split at every byte: events arrive in pieces.
	tl := tally{stream: true}
	for i := range len(stream) {
		tl.feed([]byte(stream[i : i+1]))
	}
	if c := tl.counts(); c != (counts{prompt: 12, cached: 10, completion: 5}) {
		t.Errorf("stream counts %+v", c)
	}
	plain := tally{}
	plain.feed([]byte(`{"choices":[],"timings":{"prompt_n":3,"cache_n":4,"predicted_n":9}}`))
	if c := plain.counts(); c != (counts{prompt: 7, cached: 4, completion: 9}) {
		t.Errorf("plain counts %+v", c)
	}
}

// TestTheGatewayLetsGoOfAnEngineBeingStopped: once the fleet stops an
// engine, the gateway keeps no connection to it. llama-server, stopping,
// waits a tenth of a second for the client of each open connection to
// close it, and a kept connection is read by nobody: every swap waited
// for the gateway's.
func TestTheGatewayLetsGoOfAnEngineBeingStopped(t *testing.T) {
	e := mustEnv(t, Options{})
	e.mustAdd(chatModel(t, "tiny", ggufgen.Spec{}))
	rep := e.waitServing("tiny", 1)[0]
	resp, body := e.post(context.Background(), "/v1/chat/completions", e.token, map[string]any{"model": "tiny", "max_tokens": 2,
		"messages": []map[string]string{{"role": "user", "content": "Hello"}}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	host, _ := hostOf(rep.Endpoint)
	kept := func() int {
		e.gw.engines.mu.Lock()
		defer e.gw.engines.mu.Unlock()
		return len(e.gw.engines.idle[host])
	}
	if kept() == 0 {
		t.Fatal("the gateway kept no connection to the engine after its answer")
	}
	pid := 0
	for _, r := range e.fleet.Replicas() {
		if r.ID == rep.ID {
			pid = r.PID
		}
	}
	if pid == 0 {
		t.Fatalf("the fleet names no process of %s", rep.ID)
	}
	if err := e.fleet.Stop(rep.ID); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, rep.ID+"'s engine ending after its stop", func() (bool, string) {
		return syscall.Kill(pid, 0) != nil, "it still runs"
	})
	if n := kept(); n != 0 {
		t.Errorf("the gateway keeps %d connections to %s, stopped", n, rep.ID)
	}
}

package fleetsuite_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/testkit"
)

// drainScaleDown: a model's Scaling.Max lowered from two replicas to one
// while both write long answers and clients keep asking: the replica
// given back drains, and not one request fails.
func drainScaleDown(t *testing.T, b *backend) {
	m := b.model("wide", 2, 2)
	b.serve(t, m)
	var long []*streaming
	for _, r := range b.ready(t, "wide", 2) {
		long = append(long, b.streamOn(t, r))
	}
	asking := b.clients(t, "wide", 2)
	m.Scaling = catalog.Scaling{Min: 1, Max: 1}
	b.catalog.Put(m)
	b.fleet.Poke()
	for _, s := range long {
		s.whole(t)
	}
	testkit.WaitFor(t, 2*time.Minute, "wide to keep one replica", func() (bool, string) {
		rs := b.replicas("wide")
		return len(rs) == 1 && len(b.fleet.Serving("wide")) == 1, fmt.Sprint(rs)
	})
	asking.noneFailed(t, "for wide through its scale-down")
}

// drainPromotion: a profile preferred over the one a replica runs is
// added to its model while the replica writes a long answer and clients
// keep asking: a replica of the new profile takes over, the old one
// drains, and not one request fails.
func drainPromotion(t *testing.T, b *backend) {
	m := b.model("promoted", 1, 1)
	b.serve(t, m)
	old := b.ready(t, "promoted", 1)[0]
	long := b.streamOn(t, old)
	asking := b.clients(t, "promoted", 2)
	better := m.Profiles[0]
	better.Name, better.Priority, better.Slots = "cpu-one", m.Profiles[0].Priority+100, 1
	m.Profiles = []catalog.Profile{better, m.Profiles[0]}
	b.catalog.Put(m)
	b.fleet.Poke()
	long.whole(t)
	var now fleet.Replica
	testkit.WaitFor(t, 2*time.Minute, "a replica of promoted's new profile to take over", func() (bool, string) {
		rs := b.replicas("promoted")
		served := b.fleet.Serving("promoted")
		if len(rs) == 1 && len(served) == 1 && served[0].ID != old.ID {
			now = served[0]
			return true, ""
		}
		return false, fmt.Sprint(rs)
	})
	if got := slots(t, b, now); got != 1 {
		t.Errorf("the replica after the promotion runs %d slots, want the new profile's 1", got)
	}
	asking.noneFailed(t, "for promoted through its promotion")
}

// replicaKeys: the replicas of one model hold the keys their fleet
// promises (keyPerReplica): on the local fleet each its own, which the
// other refuses; on Kubernetes the one of their Deployment, which both
// take. Either way each answers its own.
func replicaKeys(t *testing.T, b *backend) {
	b.serve(t, b.model("twins", 2, 2))
	rs := b.ready(t, "twins", 2)
	k0, k1 := b.fleet.EngineKey(rs[0].ID), b.fleet.EngineKey(rs[1].ID)
	if k0 == "" || k1 == "" {
		t.Fatalf("the replicas' keys %q and %q; want both set", k0, k1)
	}
	if own := k0 != k1; own != b.keyPerReplica {
		t.Errorf("the two replicas have their own keys: %v; the %s fleet promises %v", own, b.name, b.keyPerReplica)
	}
	other := 200
	if b.keyPerReplica {
		other = 401
	}
	for _, c := range []struct {
		what   string
		a      answer
		status int
	}{
		{"the first with its key", b.send(rs[0], k0, 2), 200},
		{"the second with its key", b.send(rs[1], k1, 2), 200},
		{"the first with the second's key", b.send(rs[0], k1, 2), other},
		{"the second with the first's key", b.send(rs[1], k0, 2), other},
	} {
		if c.a.err != nil || c.a.status != c.status {
			t.Errorf("%s: %s, want %d", c.what, c.a, c.status)
		}
	}
}

// parksAcrossRestart: a model whose engine keeps failing to start is
// parked, saying why, and a fleet started anew over the same state (the
// local fleet's database, the cluster's objects) keeps it parked for the
// same reason, starting nothing for it though its Scaling.Min asks for
// one.
func parksAcrossRestart(t *testing.T, b *backend) {
	b.serve(t, b.broken(t, "broken"))
	var parked fleet.ModelHealth
	testkit.WaitFor(t, 2*time.Minute, "broken to be parked", func() (bool, string) {
		parked, _ = b.health("broken")
		return parked.Parked, fmt.Sprintf("%+v", parked)
	})
	if parked.Reason == "" {
		t.Errorf("broken is parked saying nothing: %+v", parked)
	}
	testkit.WaitFor(t, time.Minute, "broken's engine to be stopped, parked", func() (bool, string) {
		rs := b.running("broken")
		return len(rs) == 0, fmt.Sprint(rs)
	})
	b.fleet = b.restart(t)
	b.fleet.Poke()
	// Over a few of the new fleet's looks (a second apart on one, the
	// watch and a resync of 5 s on the other) no engine of it is
	// started, even to fail again, and it says why it is parked.
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if rs := b.running("broken"); len(rs) != 0 {
			t.Fatalf("the new fleet started %v for the parked model", rs)
		}
	}
	if h, _ := b.health("broken"); !h.Parked || h.Reason != parked.Reason {
		t.Errorf("after the restart broken's health is %+v; want parked for %q", h, parked.Reason)
	}
}

// running are model's replicas that run an engine or are about to: not
// those the local fleet shows failed, the record of a parked model's
// last start.
func (b *backend) running(model string) []fleet.Replica {
	var out []fleet.Replica
	for _, r := range b.replicas(model) {
		if r.State != fleet.Failed {
			out = append(out, r)
		}
	}
	return out
}

// broken is a model of one replica whose weights no engine can load:
// bytes that are no GGUF file, in the mirror beside the tiny model's.
func (b *backend) broken(t *testing.T, name string) catalog.Model {
	t.Helper()
	data := []byte("these bytes are no GGUF file\n")
	path := filepath.Join(filepath.Dir(b.source), name+".gguf")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	m := b.model(name, 1, 1)
	m.Source, m.Weights = path, []string{name + ".gguf"}
	m.Origin.Files = []catalog.OriginFile{{Path: name + ".gguf", Bytes: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}}
	return m
}

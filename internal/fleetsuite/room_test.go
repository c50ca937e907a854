package fleetsuite_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/testkit"
)

// forOne serves what the room cases share: an always-on model of big
// memory, which holds one node's room, and the on-demand models names,
// each as big, which have the other node's room to take in turn. It
// returns the always-on model's replica.
func forOne(t *testing.T, b *backend, names ...string) string {
	t.Helper()
	b.serve(t, b.sized("resident", 1, 1, big))
	kept := b.ready(t, "resident", 1)[0].ID
	for _, n := range names {
		b.serve(t, b.sized(n, 0, 1, big))
	}
	t.Cleanup(func() {
		if rs := b.replicas("resident"); len(rs) != 1 || rs[0].ID != kept {
			t.Errorf("the always-on replica %s was touched: resident has %v", kept, rs)
		}
	})
	return kept
}

// swapForOne: with room for one on-demand model, asking the second gives
// back the idle first, and each answers in its turn.
func swapForOne(t *testing.T, b *backend) {
	forOne(t, b, "left", "right")
	for i, m := range []string{"left", "right", "left"} {
		if a := b.ask(t, m, 4); !a.ok() {
			t.Fatalf("request %d, for %s, was answered %s", i, m, a)
		}
		other := map[string]string{"left": "right", "right": "left"}[m]
		if i > 0 {
			b.gone(t, other, "given back for "+m)
			h, _ := b.health(other)
			if !strings.Contains(h.LastStop, "given back for "+m+", idle") {
				t.Errorf("%s's last stop %q; want given back for %s, idle", other, h.LastStop, m)
			}
			// The fleet page lists the swaps by whom and when.
			if h.LastStopFor != m || h.LastStopAt.IsZero() {
				t.Errorf("%s's last stop was for %q at %v; want for %s, with its time", other, h.LastStopFor, h.LastStopAt, m)
			}
		}
	}
}

// busyNeverStopped: a replica writing an answer is not stopped for
// another model that needs its room: that one waits until the answer is
// written whole, then is answered in its turn.
func busyNeverStopped(t *testing.T, b *backend) {
	forOne(t, b, "left", "right")
	if a := b.ask(t, "left", 4); !a.ok() {
		t.Fatalf("left was answered %s", a)
	}
	long := b.stream(t, "left")
	right := make(chan answer, 1)
	go func() { right <- b.ask(t, "right", 4) }()
	long.whole(t)
	a := <-right
	if !a.ok() {
		t.Errorf("right, asked while left was busy, was answered %s", a)
	}
	b.gone(t, "left", "given back for right once its answer ended")
}

// givesUpCostsNothing: a client of a model waiting for a busy replica's
// room goes away before it is answered; when the busy one falls idle it
// is not given back for a request nobody waits on, and the model that
// was asked for starts nothing and wants nothing: as if never asked.
func givesUpCostsNothing(t *testing.T, b *backend) {
	forOne(t, b, "left", "right")
	if a := b.ask(t, "left", 4); !a.ok() {
		t.Fatalf("left was answered %s", a)
	}
	long := b.stream(t, "left")
	release := b.fleet.Use("right", 1, time.Now())
	testkit.WaitFor(t, time.Minute, "right to wait for left's room", func() (bool, string) {
		h, _ := b.health("right")
		return h.Want == 1 && strings.Contains(h.Placement, "waiting for "+long.replica.ID), fmt.Sprintf("%+v", h)
	})
	release() // its client gave up
	long.whole(t)
	b.fleet.Poke()
	// A few of each fleet's looks (a second apart on one, the watch and
	// a resync of 5 s on the other) find nothing to do.
	time.Sleep(6 * time.Second)
	if rs := b.fleet.Serving("left"); len(rs) != 1 || rs[0].ID != long.replica.ID {
		t.Errorf("left serves %v after right's client gave up; want %s kept", rs, long.replica.ID)
	}
	if rs := b.replicas("right"); len(rs) != 0 {
		t.Errorf("right has %v with nobody asking; want nothing started", rs)
	}
	if h, _ := b.health("right"); h.Want != 0 {
		t.Errorf("right wants %d replicas with nobody asking: %+v", h.Want, h)
	}
}

// arrivalOrder: requests waiting for room are answered in the order they
// came, across models: a model asked again and again (left, by two
// clients with no pause between them) does not starve the one waiting
// for its room (right), which gets it before one asked after it (third);
// and left's clients lose no request for it.
func arrivalOrder(t *testing.T, b *backend) {
	forOne(t, b, "left", "right", "third")
	if a := b.ask(t, "left", 4); !a.ok() {
		t.Fatalf("left was answered %s", a)
	}
	busy := b.clients(t, "left", 2)
	time.Sleep(500 * time.Millisecond)
	// When each was answered: the first to get room answers first.
	var wg sync.WaitGroup
	var right, third answer
	var rightAt, thirdAt time.Time
	wg.Add(2)
	go func() { defer wg.Done(); right = b.ask(t, "right", 4); rightAt = time.Now() }()
	time.Sleep(200 * time.Millisecond)
	go func() { defer wg.Done(); third = b.ask(t, "third", 4); thirdAt = time.Now() }()
	wg.Wait()
	if !right.ok() || !third.ok() {
		t.Errorf("waiting behind a model asked again and again, right was answered %s and third %s", right, third)
	}
	if !rightAt.Before(thirdAt) {
		t.Errorf("third was answered %s before right, asked before it", rightAt.Sub(thirdAt))
	}
	busy.noneFailed(t, "of left's clients")
}

// headroomNeverPromised: what the fleet keeps free on a node is never
// promised: a model that fits only inside it is unplaceable, saying so in
// the same words on both fleets, and nothing is started for it.
func headroomNeverPromised(t *testing.T, b *backend) {
	for _, n := range b.fleet.Nodes() {
		if n.HeadroomBytes != headroom || n.RAMBytes != nodeRAM {
			t.Errorf("node %s: %d bytes, %d of them kept; want %d, %d kept", n.Name, n.RAMBytes, n.HeadroomBytes, nodeRAM, headroom)
		}
	}
	b.serve(t, b.sized("huge", 0, 1, nodeRAM-headroom/2))
	release := b.fleet.Use("huge", 1, time.Now())
	defer release()
	want := "no node could ever host it, busy or idle:\n" +
		"node node-1: needs 8.1 GB, it has 7.5 GB in all once 1.1 GB is kept free for the system (--headroom)\n" +
		"node node-2: needs 8.1 GB, it has 7.5 GB in all once 1.1 GB is kept free for the system (--headroom)"
	testkit.WaitFor(t, time.Minute, "huge to be unplaceable", func() (bool, string) {
		h, _ := b.health("huge")
		return h.Unplaceable && h.Placement == want, fmt.Sprintf("%+v", h)
	})
	if rs := b.replicas("huge"); len(rs) != 0 {
		t.Errorf("huge, which fits only in the headroom, has %v", rs)
	}
}

// criticalTakesRoom: a critical model takes the room of an opportunistic
// one, even one its Scaling.Min keeps, and says so.
func criticalTakesRoom(t *testing.T, b *backend) {
	var spare []string
	for _, n := range []string{"spare-1", "spare-2"} {
		m := b.sized(n, 1, 1, big)
		m.Class = catalog.ClassOpportunistic
		b.serve(t, m)
		spare = append(spare, b.ready(t, n, 1)[0].ID)
	}
	m := b.sized("vital", 1, 1, big)
	m.Class = catalog.ClassCritical
	b.serve(t, m)
	b.ready(t, "vital", 1)
	if a := b.ask(t, "vital", 4); !a.ok() {
		t.Errorf("vital was answered %s", a)
	}
	var taken []string
	for i, n := range []string{"spare-1", "spare-2"} {
		if h, _ := b.health(n); strings.Contains(h.LastStop, "stopped to make room for vital, a critical model") {
			taken = append(taken, spare[i])
		}
	}
	if len(taken) != 1 {
		t.Errorf("the opportunistic replicas given back for vital, saying so: %v; want one of %v", taken, spare)
	}
}

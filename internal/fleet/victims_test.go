package fleet

import (
	"slices"
	"strings"
	"testing"
	"time"

	"modelserve/catalog"
)

// TestVictims is the swap rule both fleets ask, case by case: which
// holders are given back for a model that needs need of room with have
// free.
func TestVictims(t *testing.T) {
	old, recent := time.Now().Add(-time.Hour), time.Now()
	h := func(id, class string, min int, busy bool, used time.Time, held int64) Holder {
		return Holder{ID: id, Model: id, Class: class, Min: min, Busy: busy, LastUsed: used, Held: held}
	}
	std, opp, crit := catalog.ClassStandard, catalog.ClassOpportunistic, catalog.ClassCritical
	asker := catalog.Model{Name: "asked"}
	critical := catalog.Model{Name: "asked", Class: crit}
	for _, tc := range []struct {
		name       string
		holders    []Holder
		asker      catalog.Model
		have, need int64
		want       []string
		ok         bool
	}{
		{"the least recently used first, as few as will do", []Holder{h("a", std, 0, false, recent, 4), h("b", std, 0, false, old, 4), h("c", std, 0, false, old.Add(time.Minute), 4)},
			asker, 1, 5, []string{"b"}, true},
		{"two when one will not do", []Holder{h("a", std, 0, false, recent, 4), h("b", std, 0, false, old, 4)},
			asker, 1, 8, []string{"b", "a"}, true},
		{"opportunistic before standard, however recent", []Holder{h("a", std, 0, false, old, 4), h("b", opp, 0, false, recent, 4)},
			asker, 0, 4, []string{"b"}, true},
		{"never critical, never kept by min, never busy", []Holder{h("a", crit, 0, false, old, 4), h("b", std, 1, false, old, 4), h("c", std, 0, true, old, 4)},
			asker, 0, 4, nil, false},
		{"enough free already: nobody", []Holder{h("a", std, 0, false, old, 4)}, asker, 4, 4, nil, true},
		{"its own model's replicas are not given back for it", []Holder{{ID: "asked-1", Model: "asked", Class: std, LastUsed: old, Held: 4}},
			asker, 0, 4, nil, false},
		{"a critical model takes a busy opportunistic one's room", []Holder{h("a", opp, 1, true, recent, 4)}, critical, 0, 4, []string{"a"}, true},
		{"behind the asker: given back once its answers end", []Holder{{ID: "a", Model: "a", Class: std, Busy: true, Behind: true, LastUsed: recent, Held: 4}},
			asker, 0, 4, []string{"a"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, ok := Victims(tc.holders, tc.asker, tc.have, tc.need)
			var ids []string
			for _, v := range got {
				ids = append(ids, v.ID)
			}
			if ok != tc.ok || !slices.Equal(ids, tc.want) {
				t.Errorf("Victims: %v, %v; want %v, %v", ids, ok, tc.want, tc.ok)
			}
		})
	}
	// What waiting would bring: the busy ones too.
	if _, all, ok := Victims([]Holder{h("a", std, 0, true, old, 4), h("b", std, 0, false, old, 2)}, asker, 0, 6); ok || all != 6 {
		t.Errorf("with a busy holder of 4 and an idle one of 2 for 6: ok %v, all %d; want not now, 6 once the busy one is idle", ok, all)
	}
}

// TestBehind is who was first, as both fleets ask it: a model's place is
// its oldest unanswered request, and a busy one is behind a waiting one
// only when all its requests came after.
func TestBehind(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var a Asks
	for _, ms := range []int{10, 30, 20, 40} { // one added out of order finds its place
		a.Add(at(ms))
	}
	a.Done(at(10))
	if a.Len() != 3 || !a.Oldest().Equal(at(20)) {
		t.Fatalf("after the first is answered: %d asks, oldest %v; want 3, the one at 20ms", a.Len(), a.Oldest().Sub(t0))
	}
	for _, tc := range []struct {
		name        string
		held, waits time.Time
		want        bool
	}{
		{"its oldest came after the waiting one's: behind", at(20), at(15), true},
		{"its oldest came before: it is answered first", at(10), at(15), false},
		{"asked at the same moment: the replica serving keeps it", at(15), at(15), false},
		{"none of its own unanswered: behind any waiting one", time.Time{}, at(15), true},
		{"nobody waits: nobody is behind", at(20), time.Time{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Behind(tc.held, tc.waits); got != tc.want {
				t.Errorf("Behind: %v; want %v", got, tc.want)
			}
		})
	}
	// A model asked again and again keeps the place of its oldest only:
	// once that is answered it is behind one that waited meanwhile.
	var x Asks
	x.Add(at(0))
	waits := at(5)
	x.Add(at(10))
	if Behind(x.Oldest(), waits) {
		t.Error("behind with a request asked before the waiting one still unanswered")
	}
	x.Done(at(0))
	if !Behind(x.Oldest(), waits) {
		t.Error("not behind once its request asked before the waiting one is answered")
	}
}

// TestResidency is the swap rule's hysteresis, stepping a clock: a
// replica used since it became ready is no victim for a model on demand
// until its residency (ResidencyLoads of its load, no less than the
// floor) has passed, and the waiting model is told how long, and when to
// look again.
func TestResidency(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	floor := 5 * time.Second
	asker := catalog.Model{Name: "beta"}
	holder := func(load time.Duration, used time.Time, now time.Time, floor time.Duration) Holder {
		h := Holder{ID: "alpha-1", Model: "alpha", Class: catalog.ClassStandard, Ready: true, LastUsed: used, Held: 4}
		h.Reside(t0, load, used, floor, now)
		return h
	}
	victims := func(h Holder) []Holder {
		v, _, _ := Victims([]Holder{h}, asker, 0, 4)
		return v
	}
	used := t0.Add(100 * time.Millisecond)

	// Inside the floor: kept, and said so.
	h := holder(100*time.Millisecond, used, t0.Add(3500*time.Millisecond), floor)
	if v, all, ok := Victims([]Holder{h}, asker, 0, 4); ok || len(v) > 0 || all != 4 {
		t.Errorf("1.5s before its residency ends: victims %v, ok %v, all %d; want none now, its 4 once it ends", v, ok, all)
	}
	why, until := Residing([]Holder{h}, asker, t0.Add(3500*time.Millisecond))
	if want := "alpha-1 is kept 2s more after its load (residency)"; why != want || !until.Equal(t0.Add(floor)) {
		t.Errorf("Residing: %q until %v; want %q until %v", why, until, want, t0.Add(floor))
	}
	if got := Keeps([]Holder{h}, asker, 0, 0, 4); got != 0 {
		t.Errorf("Keeps with only a resident holder: %d; want 0, nothing to keep now", got)
	}
	// At its end: given back, and its last stop says it had its residency.
	h = holder(100*time.Millisecond, used, t0.Add(floor), floor)
	if v := victims(h); len(v) != 1 {
		t.Fatalf("at the end of its residency: victims %v; want alpha-1", v)
	}
	if _, why := GiveBackWhy(h, asker, t0.Add(floor)); !strings.Contains(why, "after its 5s residency") {
		t.Errorf("given back after its residency: %q; want it to say so", why)
	}
	// A slow load stays ResidencyLoads of its loads, past the floor.
	if v := victims(holder(2*time.Second, used, t0.Add(19*time.Second), floor)); len(v) > 0 {
		t.Errorf("a 2s load 19s after ready: victims %v; want it kept for %d loads", v, ResidencyLoads)
	}
	if v := victims(holder(2*time.Second, used, t0.Add(20*time.Second), floor)); len(v) != 1 {
		t.Errorf("a 2s load 20s after ready: victims %v; want it given back", v)
	}
	// Never used since it became ready: nobody wants it, it is not kept.
	if v := victims(holder(100*time.Millisecond, t0.Add(-time.Second), t0.Add(time.Second), floor)); len(v) != 1 {
		t.Errorf("unused since ready: victims %v; want it given back", v)
	}
	// Residency off.
	if v := victims(holder(100*time.Millisecond, used, t0.Add(time.Second), -1)); len(v) != 1 {
		t.Errorf("residency off: victims %v; want it given back", v)
	}
	// A critical model does not wait for an opportunistic one's.
	o := holder(100*time.Millisecond, used, t0.Add(time.Second), floor)
	o.Class = catalog.ClassOpportunistic
	if v, _, _ := Victims([]Holder{o}, catalog.Model{Name: "beta", Class: catalog.ClassCritical}, 0, 4); len(v) != 1 {
		t.Errorf("critical asker, opportunistic resident: victims %v; want it given back", v)
	}
}

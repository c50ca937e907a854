package fleet

import (
	"slices"
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

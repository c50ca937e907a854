package fleet

import (
	"slices"
	"testing"
	"time"

	"modelserve/catalog"
)

// TestSpare: of the room a waiting model has now, a later model may take
// what the waiting one would have beyond its need however its busy
// holders fall idle, and nothing it needs.
func TestSpare(t *testing.T) {
	for _, c := range []struct {
		name      string
		now, need int64
		later     []int64
		want      int64
	}{
		{"enough now: what is beyond the need", 10, 6, nil, 4},
		{"just enough now: nothing", 6, 6, []int64{5}, 0},
		{"short, one busy holder gives back more than enough", 5, 6, []int64{5}, 4},
		{"short, one busy holder gives back just enough", 3, 8, []int64{5}, 0},
		{"short by 3 of a 5: 2 spare", 3, 6, []int64{5}, 2},
		{"no more spare than there is now", 2, 8, []int64{10}, 2},
		{"whichever falls idle first: the least overshoot", 4, 10, []int64{7, 6}, 0},
		{"two needed together", 1, 10, []int64{4, 4, 4}, 1},
		{"the busy holders never give back enough: all of it", 3, 10, []int64{2}, 3},
		{"nothing now", 0, 6, []int64{5, 5}, 0},
		{"others keep more than there is", -1, 6, []int64{5, 5}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Spare(c.now, c.need, c.later); got != c.want {
				t.Errorf("Spare(%d, %d, %v) = %d, want %d", c.now, c.need, c.later, got, c.want)
			}
		})
	}
}

// TestTurn: models that want room are placed the critical first, the
// opportunistic last, and within a class the first asked first, whatever
// their names say.
func TestTurn(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	crit := catalog.Model{Name: "zeta", Class: catalog.ClassCritical}
	std := catalog.Model{Name: "mu"}
	opp := catalog.Model{Name: "alpha", Class: catalog.ClassOpportunistic}
	for _, c := range []struct {
		name           string
		a, b           catalog.Model
		aAsked, bAsked time.Time
		want           int // the sign of Turn(a, b)
	}{
		{"critical before standard asked for first", crit, std, t0.Add(time.Minute), t0, -1},
		{"standard before opportunistic asked for first", std, opp, t0.Add(time.Minute), t0, -1},
		{"opportunistic after critical", opp, crit, t0, t0.Add(time.Minute), 1},
		{"the first asked first within a class", catalog.Model{Name: "b"}, catalog.Model{Name: "a"}, t0, t0.Add(time.Second), -1},
		{"the later asked after, whatever its name", catalog.Model{Name: "a"}, catalog.Model{Name: "b"}, t0.Add(time.Second), t0, 1},
		{"one nobody asks for (kept by its Min) before a waiting one", catalog.Model{Name: "b"}, catalog.Model{Name: "a"}, time.Time{}, t0, -1},
		{"asked at once: by name", catalog.Model{Name: "a"}, catalog.Model{Name: "b"}, t0, t0, -1},
		{"the same model", std, std, t0, t0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Turn(c.a, c.b, c.aAsked, c.bAsked)
			if sign(got) != c.want {
				t.Errorf("Turn(%s, %s) = %d, want the sign %d", c.a.Name, c.b.Name, got, c.want)
			}
			if back := Turn(c.b, c.a, c.bAsked, c.aAsked); sign(back) != -c.want {
				t.Errorf("Turn(%s, %s) = %d, want the sign %d", c.b.Name, c.a.Name, back, -c.want)
			}
		})
	}
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

// TestKeeps: a waiting model keeps from later ones what of the room it has
// now it would need however its busy holders fall idle: idle and draining
// holders' room is its now, busy holders', the room models before it keep,
// and replicas stopping for those give theirs back later.
func TestKeeps(t *testing.T) {
	asker := catalog.Model{Name: "first"}
	idle := func(held int64) Holder {
		return Holder{ID: "idle-1", Model: "idle", Class: catalog.ClassStandard, Held: held}
	}
	draining := func(held int64) Holder {
		return Holder{ID: "draining-1", Model: "draining", Class: catalog.ClassStandard, Busy: true, Behind: true, Held: held}
	}
	busy := func(held int64) Holder {
		return Holder{ID: "busy-1", Model: "busy", Class: catalog.ClassStandard, Busy: true, Held: held}
	}
	for _, c := range []struct {
		name                string
		hs                  []Holder
		asker               catalog.Model
		have, claimed, need int64
		stopping            []int64
		want                int64
	}{
		{"enough free: all it needs, no more", nil, asker, 10, 0, 6, nil, 6},
		{"an idle holder's room is its now", []Holder{idle(4)}, asker, 2, 0, 6, nil, 6},
		{"a draining holder's room is its now", []Holder{draining(4)}, asker, 2, 0, 6, nil, 6},
		{"a busy holder giving back more than enough: only what it cannot spare", []Holder{busy(5)}, asker, 3, 0, 6, nil, 1},
		{"a busy holder giving back just enough: all it has", []Holder{busy(3)}, asker, 3, 0, 6, nil, 3},
		{"busy holders that never give back enough: nothing", []Holder{busy(2)}, asker, 3, 0, 10, nil, 0},
		{"idle and busy together", []Holder{idle(2), busy(5)}, asker, 1, 0, 6, nil, 1},
		{"room kept by an earlier model comes back later, as a busy holder's", nil, asker, 3, 5, 6, nil, 1},
		{"a replica stopping for an earlier model gives back later", nil, asker, 3, 0, 6, []int64{5}, 1},
		{"holders never given back count for nothing", []Holder{{ID: "c-1", Model: "crit", Class: catalog.ClassCritical, Held: 5},
			{ID: "min-1", Model: "min", Class: catalog.ClassStandard, Min: 1, Held: 5}, {ID: "first-1", Model: "first", Held: 5}}, asker, 3, 0, 6, nil, 0},
		{"a critical model has a busy opportunistic holder's room now", []Holder{{ID: "o-1", Model: "opp", Class: catalog.ClassOpportunistic, Busy: true, Held: 3}},
			catalog.Model{Name: "first", Class: catalog.ClassCritical}, 3, 0, 6, nil, 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Keeps(c.hs, c.asker, c.have, c.claimed, c.need, c.stopping...); got != c.want {
				t.Errorf("Keeps(have %d, claimed %d, need %d, stopping %v) = %d, want %d", c.have, c.claimed, c.need, c.stopping, got, c.want)
			}
		})
	}
}

// TestWaited: a waiting model waits on the ready replicas answering
// requests asked before its own: not on one starting, one behind it
// (given back for it now), one idle, nor one never given back for it.
func TestWaited(t *testing.T) {
	asker := catalog.Model{Name: "first"}
	hs := []Holder{
		{ID: "busy-1", Model: "busy", Class: catalog.ClassStandard, Busy: true, Ready: true, Ahead: true, Held: 5},
		// Started for a request asked before the asker's: once ready, it
		// answers that one alone.
		{ID: "starting-1", Model: "starting", Class: catalog.ClassStandard, Busy: true, Ahead: true, Held: 5},
		// Started in room the asker could spare, for a model asked for
		// after it: it answers its own model's requests.
		{ID: "later-1", Model: "later", Class: catalog.ClassStandard, Busy: true, Held: 5},
		{ID: "behind-1", Model: "behind", Class: catalog.ClassStandard, Busy: true, Ready: true, Behind: true, Held: 5},
		{ID: "idle-1", Model: "idle", Class: catalog.ClassStandard, Ready: true, Held: 5},
		{ID: "crit-1", Model: "crit", Class: catalog.ClassCritical, Busy: true, Ready: true, Held: 5},
		{ID: "min-1", Model: "min", Class: catalog.ClassStandard, Min: 1, Busy: true, Ready: true, Held: 5},
		{ID: "first-1", Model: "first", Class: catalog.ClassStandard, Busy: true, Ready: true, Held: 5},
	}
	if got := Waited(hs, asker); !slices.Equal(got, []string{"busy-1", "starting-1"}) {
		t.Errorf("Waited = %v, want [busy-1 starting-1]", got)
	}
	opp := []Holder{{ID: "opp-1", Model: "opp", Class: catalog.ClassOpportunistic, Busy: true, Ready: true, Ahead: true, Held: 5}}
	if got := Waited(opp, catalog.Model{Name: "first", Class: catalog.ClassCritical}); len(got) != 0 {
		t.Errorf("a critical model waits on %v, a busy opportunistic replica it takes the room of now", got)
	}
}

// TestOwedRefuses: a request asked after a waiting model's oldest takes
// no replica that model waits on; one asked before, or at once, does, as
// does any request on a replica nobody waits on, or one that only a model
// with nothing asked (kept by its Min) waits on.
func TestOwedRefuses(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var o Owed
	o.Owe("beta", t0, []string{"alpha-1", "gamma-1"})
	o.Owe("delta", t0.Add(time.Minute), []string{"eps-1"})
	o.Owe("min", time.Time{}, []string{"zeta-1"})
	for _, c := range []struct {
		name  string
		id    string
		asked time.Time
		want  bool
	}{
		{"asked after the waiting model's", "alpha-1", t0.Add(time.Second), true},
		{"another replica it waits on", "gamma-1", t0.Add(time.Second), true},
		{"asked before", "alpha-1", t0.Add(-time.Second), false},
		{"asked at once", "alpha-1", t0, false},
		{"a replica nobody waits on", "other-1", t0.Add(time.Second), false},
		{"before the second waiting model's", "eps-1", t0.Add(time.Second), false},
		{"after the second waiting model's", "eps-1", t0.Add(2 * time.Minute), true},
		{"waited on by a model with nothing asked", "zeta-1", t0.Add(time.Hour), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := o.Refuses(c.id, c.asked); got != c.want {
				t.Errorf("Refuses(%s, %s) = %v, want %v", c.id, c.asked.Sub(t0), got, c.want)
			}
		})
	}
	o.Owe("beta", t0, nil)
	if o.Refuses("alpha-1", t0.Add(time.Second)) {
		t.Error("beta waits on nothing now, and alpha-1 still refuses a request asked after it")
	}
	var none Owed
	if none.Refuses("alpha-1", t0) {
		t.Error("the zero Owed refuses a request")
	}
}

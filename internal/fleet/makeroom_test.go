package fleet

import (
	"slices"
	"testing"
	"time"

	"modelserve/catalog"
)

// TestMakeRoom is the one room-making rule both fleets ask, on one node
// of what they report: where a model that wants a replica is placed, who
// is given back for it, what it waits for, and the sentence its placement
// says on either backend.
func TestMakeRoom(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const gb = int64(1) << 30
	p := catalog.Profile{RAMBytes: 4 * gb}
	beta := catalog.Model{Name: "beta", Profiles: []catalog.Profile{p}}
	critical := beta
	critical.Class = catalog.ClassCritical
	idle := Holder{ID: "alpha-1", Model: "alpha", Class: catalog.ClassStandard, Ready: true, Held: 4 * gb, LastUsed: t0}
	busy := idle
	busy.Busy, busy.Ahead = true, true
	opp := busy
	opp.Class = catalog.ClassOpportunistic
	resident := idle
	resident.Reside(t0, 200*time.Millisecond, t0.Add(time.Second), DefaultResidency, t0.Add(2*time.Second))
	spot := func(free int64, hs ...Holder) Spot {
		return Spot{Node: "n1", Exists: true, Free: free, RAM: free, Holders: hs}
	}
	for _, tt := range []struct {
		name    string
		asker   catalog.Model
		spots   []Spot
		kept    func(*Kept)
		text    string
		fits    string
		victims []string
		waits   bool
		waited  []string
		until   time.Time
		keeps   int64
	}{
		{name: "it fits where the most is free", asker: beta,
			spots: []Spot{spot(5 * gb), {Node: "n2", Exists: true, Free: 6 * gb, RAM: 6 * gb}}, fits: "n2"},
		{name: "an idle holder is given back", asker: beta, spots: []Spot{spot(2*gb, idle)},
			text: "making room on node n1: giving back alpha-1", victims: []string{"alpha-1"}, keeps: 0},
		{name: "of the free room it keeps what the holders given back do not cover", asker: beta,
			spots: []Spot{spot(3*gb, Holder{ID: "gamma-1", Model: "gamma", Class: catalog.ClassStandard, Ready: true, Held: 2 * gb})},
			text:  "making room on node n1: giving back gamma-1", victims: []string{"gamma-1"}, keeps: 2 * gb},
		{name: "a busy holder is waited for", asker: beta, spots: []Spot{spot(2*gb, busy)},
			text: "making room on node n1: waiting for alpha-1 to finish the requests it answers",
			// Once alpha-1 gives back its 4 GB, 2 of the 2 free now are
			// beyond beta's need: the models after it may take them.
			waits: true, waited: []string{"alpha-1"}, keeps: 0},
		{name: "a busy holder is waited for, saying how many requests it answers", asker: beta, spots: []Spot{spot(2*gb, answering(busy, 3))},
			text:  "making room on node n1: waiting for alpha-1 to finish the 3 requests it answers",
			waits: true, waited: []string{"alpha-1"}, keeps: 0},
		{name: "and the one it answers", asker: beta, spots: []Spot{spot(2*gb, answering(busy, 1))},
			text:  "making room on node n1: waiting for alpha-1 to finish the request it answers",
			waits: true, waited: []string{"alpha-1"}, keeps: 0},
		{name: "a critical model takes a busy opportunistic one's room", asker: critical, spots: []Spot{spot(2*gb, opp)},
			text: "making room on node n1: giving back alpha-1", victims: []string{"alpha-1"}, keeps: 0},
		{name: "a resident holder is waited for until its residency ends", asker: beta, spots: []Spot{spot(2*gb, resident)},
			text:  "making room on node n1: waiting: alpha-1 is kept 3s more after its load (residency)",
			waits: true, until: t0.Add(DefaultResidency), keeps: 0},
		{name: "a replica given back for it is waited for to stop", asker: beta,
			spots: []Spot{{Node: "n1", Exists: true, Free: 1 * gb, RAM: 1 * gb, Going: []Going{{ID: "alpha-1", Held: 4 * gb, For: "beta"}}}},
			text:  "making room on node n1: waiting for alpha-1 to stop", keeps: 0},
		{name: "room kept for a model asked for before it is not its", asker: beta, spots: []Spot{spot(5 * gb)},
			kept:  func(k *Kept) { k.Keep("n1", p, catalog.Model{Name: "gamma"}, 2*gb) },
			text:  "making room on node n1: waiting behind gamma, asked for before it",
			waits: true, keeps: 2 * gb},
		{name: "nothing can be made where nothing could host it", asker: beta,
			spots: []Spot{{Node: "n1", Free: 1 * gb, RAM: 1 * gb, Holders: []Holder{idle}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kept := &Kept{}
			if tt.kept != nil {
				tt.kept(kept)
			}
			before := kept.Of("n1", p)
			d := MakeRoom(tt.asker, []Want{{Profile: p, Need: p.RAMBytes, Spots: tt.spots}}, kept, t0.Add(2*time.Second))
			var victims []string
			for _, v := range d.Victims {
				victims = append(victims, v.ID)
			}
			fits := ""
			if d.Fits {
				fits = d.Node
			}
			if d.Text != tt.text || fits != tt.fits || !slices.Equal(victims, tt.victims) || d.Waits != tt.waits ||
				!slices.Equal(d.Waited, tt.waited) || !d.Until.Equal(tt.until) {
				t.Errorf("decided %+v; want text %q, fits on %q, victims %v, waits %v on %v until %v",
					d, tt.text, tt.fits, tt.victims, tt.waits, tt.waited, tt.until)
			}
			if k := kept.Of("n1", p) - before; k != tt.keeps {
				t.Errorf("beta keeps %d bytes of n1 from the models after it; want %d", k, tt.keeps)
			}
		})
	}
}

// answering is h answering n requests (Drains.Holds).
func answering(h Holder, n int) Holder {
	h.Answering = n
	return h
}

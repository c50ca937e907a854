package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"modelserve/catalog"
	"modelserve/internal/words"
)

// modelState is what the fleet remembers of a model between passes.
type modelState struct {
	class string
	want  int
	// addedAt tells a model added again (a retry, an edit) from the one
	// the state is about: adding it again gives it a fresh start.
	addedAt      time.Time
	failedStarts int // in a row
	parked       bool
	reason       string
	// engineMissing is a model parked because there was no engine to
	// start: it is started again once there is one.
	engineMissing bool
	// lasting is a model parked for its engine's failures to start: the
	// park is kept (Options.Parks) and outlasts a restart.
	lasting     bool
	min         int
	unplaceable bool
	// waitsForIdle is a model waiting for busy replicas of others to fall
	// idle and give back their room (swap.go).
	waitsForIdle bool
	// residencyEnds is, while it waits for room replicas of others hold
	// for their residency, when the first of those ends.
	residencyEnds time.Time
	// lastStop says which of its replicas was last given back, for whom,
	// why and when.
	lastStop  GivenBack
	placement string
	hardware  bool
}

// reconcile compares the catalog with the replicas and starts or stops
// replicas until they agree. reread has it read the catalog again; else
// it compares the catalog as it last read it (look).
func (f *Fleet) reconcile(ctx context.Context, reread bool) {
	if ctx.Err() != nil {
		return
	}
	if reread || f.listed == nil { // an empty catalog is read every time
		listed, err := f.opts.Catalog.List(ctx)
		if err != nil {
			// A catalog that cannot be read is no reason to stop what runs.
			if ctx.Err() == nil {
				f.log.Error("reading the catalog to reconcile the fleet", "err", err)
			}
			return
		}
		f.listed = listed
		f.fps.update(listed)
	}
	models := slices.Clone(f.listed) // sorted below
	if f.opts.beforePass != nil {
		f.opts.beforePass()
	}
	nodes := f.passNodes(reread)
	// What each node could host, were it idle, is its hardware's alone:
	// worked out once a pass, not once a model.
	caps := make([]Capacity, len(nodes))
	for i, n := range nodes {
		caps[i] = f.opts.Headroom.Room(n.Name, n.Capacity, 0, 0).Capacity()
	}
	haveEngine := f.backend.Check(catalog.Model{}) == nil

	defer f.flushUnparks() // after the unlock: it writes to the database
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.settleLocked()
	byName := make(map[string]catalog.Model, len(models))
	for _, m := range models {
		byName[m.Name] = m
	}
	for name := range f.restored {
		if _, ok := byName[name]; !ok {
			delete(f.restored, name)
			f.unparkLocked(name) // removed from the catalog while modelserve was down
		}
	}
	// 1. Replicas of models gone from the catalog, or started from an
	// entry since changed: stopped.
	for id, r := range f.replicas {
		m, ok := byName[r.model]
		switch {
		case !ok && r.released:
			delete(f.replicas, id)
		case !ok:
			f.stopLocked(r, "its model was removed from the catalog")
		case f.runsOf(m) != r.fingerprint:
			if r.released {
				delete(f.replicas, id)
			} else {
				f.stopLocked(r, "its model's catalog entry changed: a replica of the new entry replaces it")
			}
		}
	}
	for name, st := range f.models {
		if _, ok := byName[name]; !ok {
			if st.lasting {
				f.unparkLocked(name)
			}
			f.memWaits.Forget(name)
			delete(f.models, name)
		}
	}
	f.demands.Keep(func(name string) bool { _, ok := byName[name]; return ok })

	// 2. Each model to as many replicas as it wants.
	// Within a class, the models asked for first are placed first: requests
	// waiting for room are served in the order they came.
	slices.SortFunc(models, func(a, b catalog.Model) int {
		return Turn(a, b, f.askedAtLocked(a.Name), f.askedAtLocked(b.Name))
	})
	now := f.opts.Clock.Now()
	// The room each model that waits for it keeps from those after it,
	// and the replicas it waits on, found afresh.
	kept := &Kept{}
	f.owed = Owed{}
	// Each model's replicas, found in one look at them all rather than one
	// a model; a replica given back on the way is stopping by its turn.
	replicasOf := map[string][]*replica{}
	for _, r := range f.replicas {
		replicasOf[r.model] = append(replicasOf[r.model], r)
	}
	for _, m := range models {
		st := f.stateLocked(m, haveEngine)
		st.want = f.demands.Want(m, now) // Min, or more while in demand (demand.go)
		var active []*replica
		for _, r := range replicasOf[m.Name] {
			if !r.released && !r.stopping {
				active = append(active, r)
			}
		}
		if f.demands.Abandoned(m, st.want, len(active)) {
			f.memWaits.Forget(m.Name)
			st.want = m.Scaling.Min
		}
		if len(active) > st.want {
			// The ones not yet serving go first, then the newest.
			slices.SortFunc(active, func(a, b *replica) int {
				aReady, bReady := f.seenLocked(a).State == Ready, f.seenLocked(b).State == Ready
				return cmp.Or(cmp.Compare(boolRank(aReady), boolRank(bReady)), compareIDs(b.id, a.id))
			})
			for _, r := range active[:len(active)-st.want] {
				f.stopLocked(r, surplusReason(m, st.want))
			}
			active = active[len(active)-st.want:]
		}
		if st.parked {
			continue
		}
		st.unplaceable, st.placement, st.waitsForIdle, st.residencyEnds = false, "", false, time.Time{}
		st.hardware = hardware(m, caps)
		if len(active) >= st.want {
			continue
		}
		if err := f.backend.Check(m); err != nil {
			// Restarting cannot install an engine, nor fetch weights:
			// parked now, and for want of an engine started once there
			// is one.
			st.failedStarts = max(st.failedStarts, 1)
			st.parked, st.reason = true, sentenceOf(err)
			if errors.Is(err, ErrEngineMissing) {
				st.engineMissing = true
			}
			continue
		}
		for len(active) < st.want {
			r, text, ok := f.placeLocked(ctx, m, nodes, kept)
			if !ok {
				st.placement = text
				// Waiting for replicas to stop and give back their room
				// is not being unplaceable.
				st.unplaceable = !strings.HasPrefix(text, Making)
				if st.unplaceable {
					f.memWaits.Forget(m.Name)
				} else {
					f.memWaits.Waiting(m.Name, now)
				}
				break
			}
			f.memWaits.Placed(m.Name, f.opts.Clock.Now())
			active = append(active, r)
		}
	}
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// compareIDs orders "name-2" before "name-10".
func compareIDs(a, b string) int {
	na, _ := idNumber(a)
	nb, _ := idNumber(b)
	return cmp.Or(cmp.Compare(na, nb), strings.Compare(a, b))
}

// idNumber is the number a replica's id ends with ("name-10" is 10); false
// for an id that ends with none.
func idNumber(id string) (int, bool) {
	n, err := strconv.Atoi(id[strings.LastIndexByte(id, '-')+1:])
	return n, err == nil
}

// stateLocked is the model's state, fresh for a model new to the fleet or
// added again since, and for one parked for want of an engine when there
// is one now.
func (f *Fleet) stateLocked(m catalog.Model, haveEngine bool) *modelState {
	st := f.models[m.Name]
	if st == nil || !st.addedAt.Equal(m.AddedAt) || (st.parked && st.engineMissing && haveEngine) {
		for id, r := range f.replicas {
			if r.model == m.Name && r.released {
				delete(f.replicas, id) // the failed replicas of before
			}
		}
		if st != nil && st.lasting {
			f.unparkLocked(m.Name) // served again, or changed: a fresh start
		}
		st = &modelState{addedAt: m.AddedAt}
		if pk, ok := f.restored[m.Name]; ok {
			delete(f.restored, m.Name)
			// Kept before the fleets shared one fingerprint, its key
			// is of the form of then; kept before keys (a cluster's
			// owner annotation), its fingerprint alone names it.
			if pk.key == parkKey(f.fps.of(m), m.AddedAt) || pk.key == parkKey(localFingerprint(m), m.AddedAt) ||
				pk.key == "" && pk.fingerprint == Fingerprint(m) {
				st.parked, st.lasting, st.reason, st.failedStarts = true, true, pk.reason, pk.failures
				f.log.Info("model parked before modelserve restarted; not started again until it is served again",
					"model", m.Name, "parked_at", pk.at, "reason", pk.reason)
			} else {
				f.unparkLocked(m.Name) // its entry changed while modelserve was down
			}
		}
		f.models[m.Name] = st
	}
	st.class, st.min = m.ClassOrDefault(), m.Scaling.Min
	return st
}

// stopLocked retires r, saying why: it takes no new request, and its
// engine stops once those it has end (drain.go).
func (f *Fleet) stopLocked(r *replica, why string) {
	f.retireLocked(r, why)
}

// stopAll stops every engine now: modelserve is going, and its gateway
// with it.
func (f *Fleet) stopAll(why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.replicas {
		if r.released {
			continue
		}
		f.drains.Forget(r.id)
		r.stopping, r.state, r.detail = true, Stopping, why
		f.backend.Stop(r.id, why)
	}
}

// account is a node's room as the fleet counts it: its Room, with the
// replicas holding it.
type account struct {
	Room
	// cap is the node's capacity less the headroom: what it may promise.
	cap        Capacity
	holders    []*replica
	cardHolder map[int]string
}

func (f *Fleet) accountLocked(n NodeInfo) account {
	var promised, outstanding int64
	a := account{cardHolder: map[int]string{}}
	for _, r := range f.replicas {
		if r.released || f.nodeOfLocked(r) != n.Name {
			continue
		}
		a.holders = append(a.holders, r)
		promised += r.memBytes
		outstanding += max(0, r.memBytes-f.seenLocked(r).RSSBytes)
		for _, i := range r.cards {
			a.cardHolder[i] = r.id
		}
	}
	slices.SortFunc(a.holders, func(x, y *replica) int { return cmp.Or(strings.Compare(x.model, y.model), compareIDs(x.id, y.id)) })
	a.Room = f.opts.Headroom.Room(n.Name, n.Capacity, promised, outstanding)
	a.Local = n.Local
	a.cap = a.Room.Capacity()
	return a
}

// roomLocked is node n's room as the API and the planner see it: with
// the replicas on it, the cards they hold, and which of them the swap
// rule would give back for a model that needs their room.
func (f *Fleet) roomLocked(n NodeInfo, now time.Time) Room {
	a := f.accountLocked(n)
	r := a.Room
	give := map[string]bool{}
	for _, h := range a.holders {
		r.Replicas = append(r.Replicas, h.id)
		if f.giveLocked(h, catalog.Model{}, now) == idleGive {
			give[h.id] = true
			r.Reclaimable = append(r.Reclaimable, h.id)
			r.ReclaimableBytes += h.memBytes
		}
	}
	for i := range r.Cards {
		r.Cards[i].Holder = a.cardHolder[r.Cards[i].Index]
		r.Cards[i].Reclaimable = give[r.Cards[i].Holder]
	}
	return r
}

// cardsFor are the node's cards of p's class with the memory p needs on
// each, and which of them are not promised.
func cardsFor(p catalog.Profile, a account) (fit, free []int) {
	for _, c := range a.cap.GPUs {
		if c.Class != p.GPUClass || c.MemoryBytes < p.CardBytes {
			continue
		}
		fit = append(fit, c.Index)
		if a.cardHolder[c.Index] == "" {
			free = append(free, c.Index)
		}
	}
	return fit, free
}

// profiles are the model's profiles the fleet can start, highest priority
// first.
func profiles(m catalog.Model) []catalog.Profile {
	var out []catalog.Profile
	for _, p := range m.Profiles {
		if p.Engine == "" || p.Engine == engineLlamaCpp || runsOnVLLM(p) {
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b catalog.Profile) int { return cmp.Compare(b.Priority, a.Priority) })
	return out
}

// exists is whether node's hardware could host a replica of p, were it
// idle.
func exists(p catalog.Profile, a account) bool { return CouldHost(p, a.cap) }

// hardware is whether any node, of what its hardware could host (caps,
// each an account's cap), could ever host a replica of m.
func hardware(m catalog.Model, caps []Capacity) bool {
	for _, p := range profiles(m) {
		for _, c := range caps {
			if CouldHost(p, c) {
				return true
			}
		}
	}
	return false
}

// capsOf are the accounts' caps, for hardware and coresFor.
func capsOf(accts []account) []Capacity {
	caps := make([]Capacity, len(accts))
	for i, a := range accts {
		caps[i] = a.cap
	}
	return caps
}

// coresFor are the CPU cores of each node (caps as hardware takes them)
// whose hardware could host a replica of p: an engine not told its
// threads is given as many on whichever it lands.
func coresFor(p catalog.Profile, nodes []NodeInfo, caps []Capacity) []int {
	var cores []int
	for i, n := range nodes {
		if CouldHost(p, caps[i]) {
			cores = append(cores, n.Capacity.CPUCores)
		}
	}
	return cores
}

// placeLocked starts a replica of m where it fits, or makes room for it
// (MakeRoom), or says, node by node, what holds it. Room kept for models
// before it (kept) is not its.
func (f *Fleet) placeLocked(ctx context.Context, m catalog.Model, nodes []NodeInfo, kept *Kept) (*replica, string, bool) {
	profs := profiles(m)
	if len(profs) == 0 {
		var engines []string
		for _, p := range m.Profiles {
			engines = append(engines, p.Name+" runs "+p.Engine)
		}
		return nil, fmt.Sprintf("no node can host it: the fleet starts llama.cpp's llama-server and vLLM only, and its profiles want other engines (%s)",
			strings.Join(engines, ", ")), false
	}
	now := f.opts.Clock.Now()
	accts := make([]account, len(nodes))
	for i, n := range nodes {
		accts[i] = f.accountLocked(n)
	}
	wants := make([]Want, len(profs))
	byID := map[string]*replica{}
	for i, p := range profs {
		wants[i] = f.roomWantLocked(m, p, nodes, accts, byID, now)
	}
	d := MakeRoom(m, wants, kept, now)
	switch {
	case d.Fits:
		p, a := profs[d.Want], accts[d.Spot]
		var cards []int
		if p.GPUClass != "" {
			_, free := cardsFor(p, a)
			cards = free[:p.Cards()]
		}
		r, err := f.startLocked(ctx, m, p, nodes[d.Spot].Name, cards, coresFor(p, nodes, capsOf(accts)))
		if err != nil {
			return nil, "its replica could not be started: " + err.Error(), false
		}
		return r, "", true
	case len(d.Victims) > 0:
		stopped := make([]string, len(d.Victims))
		for i, v := range d.Victims {
			f.giveBackLocked(byID[v.ID], m, now)
			stopped[i] = v.ID
		}
		f.log.Info("giving back replicas to make room", "model", m.Name, "node", d.Node, "replicas", strings.Join(stopped, ", "))
		return nil, d.Text, false
	case d.Waits:
		// Those answering requests asked before its own take none asked
		// after it meanwhile (Owed).
		if st := f.models[m.Name]; st != nil {
			st.waitsForIdle, st.residencyEnds = true, d.Until
		}
		if !d.Until.IsZero() {
			f.wakeAtLocked(d.Until, now)
		}
		f.owed.Owe(m.Name, f.askedAtLocked(m.Name), d.Waited)
		return nil, d.Text, false
	case d.Text != "":
		return nil, d.Text, false
	}
	var lines []string
	for _, p := range profs {
		for i, n := range nodes {
			a := accts[i]
			if p.GPUClass != "" && a.Free-kept.RAM(n.Name) >= p.HostBytes() {
				fit, free := cardsFor(p, a)
				lines = append(lines, cardLine(n.Name, p, a, len(fit), len(free))+kept.Line(n.Name, p))
				continue
			}
			lines = append(lines, memLine(n.Name, p.HostBytes(), a)+kept.Line(n.Name, p))
		}
	}
	if !hardware(m, capsOf(accts)) {
		return nil, "no node could ever host it, busy or idle:\n" + strings.Join(lines, "\n"), false
	}
	return nil, strings.Join(lines, "\n"), false
}

// roomWantLocked is what m finds on the nodes (accts) for a replica of
// p, as MakeRoom weighs it: on cards, whole cards of p's class with the
// memory p needs on each, else bytes of RAM. byID gets the replicas the
// holders are.
func (f *Fleet) roomWantLocked(m catalog.Model, p catalog.Profile, nodes []NodeInfo, accts []account, byID map[string]*replica, now time.Time) Want {
	w := Want{Profile: p, Need: p.HostBytes()}
	if p.GPUClass != "" {
		w.Need = int64(p.Cards())
	}
	for i, n := range nodes {
		a := accts[i]
		s := Spot{Node: n.Name, Exists: exists(p, a), Free: a.Free, RAM: a.Free}
		var fit []int
		if p.GPUClass != "" {
			var free []int
			fit, free = cardsFor(p, a)
			s.Free = int64(len(free))
		}
		for _, r := range a.holders {
			h := r.memBytes
			if p.GPUClass != "" {
				h = 0
				for _, c := range r.cards {
					if slices.Contains(fit, c) {
						h++
					}
				}
			}
			if h == 0 {
				continue
			}
			if r.stopping {
				s.Going = append(s.Going, Going{ID: r.id, Held: h, For: r.evictedFor})
				continue
			}
			if hr := f.holderLocked(r, m, h, now); hr != nil {
				s.Holders = append(s.Holders, *hr)
				byID[r.id] = r
			}
		}
		w.Spots = append(w.Spots, s)
	}
	return w
}

// memLine says why a node has no room for need bytes.
func memLine(node string, need int64, a account) string {
	if a.cap.RAMBytes < need {
		return KeptLine(node, need, a.cap.RAMBytes, a.Kept)
	}
	s := fmt.Sprintf("node %s: needs %s, %s free", node, words.Size(need), words.Size(a.Free))
	for _, r := range a.holders {
		s += fmt.Sprintf("; replica %s of %s uses %s", r.id, r.model, words.Size(r.memBytes))
		if r.stopping {
			s += " (stopping)"
		}
	}
	if len(a.holders) == 0 && a.cap.AvailableBytes < need {
		s += "; other programs on the node use the rest"
	}
	return s
}

// cardLine says why a node has no cards for p.
func cardLine(node string, p catalog.Profile, a account, fit, free int) string {
	want := p.Cards()
	if fit < want {
		return fmt.Sprintf("node %s: needs %d %s %s with %s each, it has %d", node, want, p.GPUClass,
			words.Plural(want, "card", "cards"), words.Size(p.CardBytes), fit)
	}
	s := fmt.Sprintf("node %s: needs %d %s %s, %d free", node, want, p.GPUClass, words.Plural(want, "card", "cards"), free)
	for _, r := range a.holders {
		if len(r.cards) > 0 {
			s += fmt.Sprintf("; replica %s of %s uses %d", r.id, r.model, len(r.cards))
		}
	}
	return s
}

// wakeAtLocked has the fleet look again at at, when a residency a model
// waits for ends, unless it looks before then already: the model's
// requests go on the moment the room may be theirs, not at a tick.
func (f *Fleet) wakeAtLocked(at, now time.Time) {
	if !f.wakeAt.IsZero() && f.wakeAt.After(now) && !at.Before(f.wakeAt) {
		return
	}
	f.wakeAt = at
	// A new timer each time: a fake clock's fired timer cannot be reset.
	if f.resides != nil {
		f.resides.Stop()
	}
	f.resides = f.opts.Clock.AfterFunc(at.Sub(now), f.look)
}

// startLocked creates a replica of m with profile p on node, with cards,
// and has the backend start it; cores are coresFor's.
func (f *Fleet) startLocked(ctx context.Context, m catalog.Model, p catalog.Profile, node string, cards, cores []int) (*replica, error) {
	f.seq[m.Name]++
	id := m.Name + "-" + strconv.Itoa(f.seq[m.Name])
	need := p.HostBytes()
	r := &replica{id: id, model: m.Name, profile: p.Name, fingerprint: f.runsOf(m), node: node, memBytes: need, cards: cards}
	f.replicas[id] = r
	f.log.Info("placing a replica", "replica", id, "node", node, "profile", p.Name, "memory_bytes", need)
	err := f.backend.Start(ctx, Placement{ID: id, Model: m, Profile: p, Node: node, Cards: cards, Cores: cores, Fingerprint: r.fingerprint})
	if err != nil {
		delete(f.replicas, id)
		f.log.Error("the replica could not be started", "replica", id, "err", err)
		return nil, err
	}
	return r, nil
}

// nodesFresh is how long a look may place by the nodes' memory as last
// read. Their free memory changes under other programs too, so it is
// read again on every pass that rereads the catalog (the tick's, at most
// Options.Interval apart) and by a look once it is this old: within a
// second, what other programs took meanwhile is within the headroom kept
// for them. Reading it is a file read a node, on the swap path.
const nodesFresh = time.Second

// passNodes are the nodes a pass places on: read again for a pass that
// reread the catalog, and for a look unless nothing that moves their
// memory has happened since the last read. What moves it is an engine
// of the fleet's exiting (its memory is the node's again), starting,
// loading or stopping (MemAvailable follows what it takes or gives back,
// while its promise stays as it was), and time (other programs).
func (f *Fleet) passNodes(reread bool) []NodeInfo {
	ended := f.ended.Swap(false)
	now := f.opts.Clock.Now()
	if reread || ended || !f.settled || f.nodes == nil || now.Sub(f.nodesAt) >= nodesFresh {
		f.nodes, f.nodesAt = f.backend.Nodes(), now
	}
	return f.nodes
}

// settleLocked notes, at a pass's end, whether every engine is ready or
// gone: until then, each look reads the nodes again (passNodes).
func (f *Fleet) settleLocked() {
	f.settled = true
	for _, r := range f.replicas {
		if !r.released && (r.stopping || f.seenLocked(r).State != Ready) {
			f.settled = false
			return
		}
	}
}

package kubefleet

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/words"
)

// Swapping, as the local fleet does it: a model asked for that no node
// has room for takes the room of idle pods of models served on demand.
// Whether it fits, whom it gives back, what it waits for and what its
// placement says are decided by the fleet's one rule (fleet.MakeRoom),
// which the local fleet asks too: this file tells it the nodes and the
// pods (roomWant) and acts on what it decides. Which pods go: least
// recently used first, as few as will do, opportunistic before standard,
// never a model's that its Scaling.Min keeps, never one answering a
// request. Their models are forgotten as asked for, so their Deployments
// are scaled to 0 before the asked one's is scaled up, and the scheduler
// places its pod once theirs have gone. When nothing can be given back,
// the scheduler's own words say what holds it.
//
// Requests waiting for room are served in the order they came, by the
// local fleet's rule (fleet.Behind): a model answering requests all asked
// after a waiting model's oldest is given back for it, and a critical
// model takes the room of opportunistic ones, busy or kept by their Min,
// as on the local fleet. A model so given back is held at 0 (heldBack),
// not forgotten: its requests keep their place, and it is scaled up again
// once no model asked for before them waits for room. A busy pod a
// waiting model waits on takes no request asked after that model's
// (fleet.Owed), so none is let hold up its give-back.
//
// Room that comes free while a model asked for first waits for busy pods
// is the first one's too, by the local fleet's rule (fleet.Spare): a model
// asked for later takes of it only what the first would never need
// (keptBefore). Otherwise the later one's Deployment stays at the pods it
// has placed, since a pod of it waiting for the scheduler would be placed
// in the room the moment it came free, and its placement says, as the
// local fleet's does, how much of the room is kept for whom. The room of
// pods given back for a model is that model's as they go (givenFor), as
// a replica stopping for a model is on the local fleet: the models after
// it count it as coming back to them only once it is done with it.

// fits is whether node n has room for a pod of profile p now (free), or
// could have, were it idle: what the pod's requests ask, counted as the
// scheduler counts them (room).
func fits(p catalog.Profile, n node, free bool) bool {
	mem, cpu, gpus := n.mem, n.cpu, n.gpus
	if free {
		mem, cpu, gpus = n.mem-n.memUsed, n.cpu-n.cpuUsed, n.gpus-n.gpuUsed
	}
	cards := int64(0)
	if p.GPUClass != "" {
		if !strings.EqualFold(n.class, classOf(p.GPUClass)) {
			return false
		}
		cards = int64(p.Cards())
	}
	return mem >= p.HostBytes() && cpu >= int64(p.CPUCores) && gpus >= cards
}

// wantsRoom is whether m wants more pods than the scheduler has placed,
// for its Min or for requests waiting now: a request that went away
// before its pod was placed has nobody given back on its behalf.
func (f *Fleet) wantsRoom(m catalog.Model, want int) bool {
	d, _ := f.demands.Of(m.Name)
	asked := d.Asked > 0
	if !asked && want > m.Scaling.Min {
		return false
	}
	placed := 0
	for _, p := range f.modelPods(m.Name) {
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			placed++
		}
	}
	return placed < want
}

// holding is one of the fleet's pods on a node, as the swap rule sees it,
// with the memory and cards it asks for; going is a pod that gives its
// room back already, and givenFor the model it was given back for ("" for
// none in particular: its room is whoever's needs it). Whether it is
// behind a waiting model (fleet.Behind) is each asker's to say, from its
// readiness and its model's oldest unanswered request (asked).
type holding struct {
	fleet.Holder
	node      string
	mem, gpus int64
	going     bool
	givenFor  string
	asked     time.Time
}

// holdings are the fleet's pods bound to nodes, as the swap rule sees
// them. byName is the catalog: a pod of a model no longer in it, of one
// no longer wanted (asked for by nobody lately, and kept by no Min), of
// one given back, or one its Deployment is losing, is going already.
//
// Busy is said of each pod: one answering a request (Hold), or not ready
// yet, or of a model with requests asked that no pod holds yet (they go
// to whichever of its pods frees first). A model with one pod streaming
// has its other pods idle.
func (f *Fleet) holdings(byName map[string]catalog.Model) []holding {
	pods, _ := f.pods.Pods(f.opts.Namespace).List(labels.SelectorFromSet(labels.Set{labelManagedBy: managedBy}))
	var out []holding
	f.mu.Lock()
	defer f.mu.Unlock()
	held := map[string]int{}
	listed := make(map[string]bool, len(pods))
	for _, pod := range pods {
		held[pod.Annotations[annotationModel]] += f.drains.Holds(pod.Name)
		listed[pod.Name] = true
	}
	for id := range f.givenFor {
		if !listed[id] { // gone: its room has come back
			delete(f.givenFor, id)
		}
	}
	f.drains.Prune(func(id string) bool { return listed[id] })
	now := f.opts.Clock.Now()
	for _, pod := range pods {
		if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		_, mem, gpus := requests(pod, f.opts.GPUResource)
		name := pod.Annotations[annotationModel]
		m, ok := byName[name]
		d, asked := f.demands.Of(name)
		dr := f.leaving[pod.Name]
		unrouted := d.Asked > held[name]
		h := holding{node: pod.Spec.NodeName, mem: mem, gpus: gpus,
			going: pod.DeletionTimestamp != nil || !ok || !asked && m.Scaling.Min == 0 || f.heldBack[name] || dr != nil && dr.deployment != "",
			Holder: fleet.Holder{ID: pod.Name, Model: name, Class: m.ClassOrDefault(), Min: m.Scaling.Min, Ready: isReady(pod),
				Busy: !isReady(pod) || f.drains.Holds(pod.Name) > 0 || unrouted, Answering: f.drains.Holds(pod.Name)}}
		h.LastUsed, h.asked = d.LastUse, d.Oldest
		// Its engine's load, from its container's start to its pod's
		// readiness: what its residency is counted from.
		r := replica(pod)
		h.Reside(r.ReadyAt, r.ReadyAt.Sub(r.Started), f.drains.UsedAt(pod.Name), f.opts.Residency, now)
		if h.going {
			h.givenFor = f.givenFor[pod.Name]
		} else {
			delete(f.givenFor, pod.Name) // not going after all: what gave it back is past
		}
		out = append(out, h)
	}
	return out
}

// roomWant is what model asker, whose oldest waiting request was asked
// at waits, finds on nodes for a pod of p, as fleet.MakeRoom weighs it:
// what a pod of p needs (memory, or cards) free on each node, the pods
// going there with whom they were given back for, and the others as the
// swap rule sees them for asker (fleet.Victims). The room of pods given
// back for a model is that model's as they go: the models after it count
// it as coming back to them only once it is done with it.
func roomWant(hs []holding, p catalog.Profile, nodes []node, asker string, waits time.Time) fleet.Want {
	w := fleet.Want{Profile: p, Need: p.HostBytes()}
	if p.GPUClass != "" {
		w.Need = int64(p.Cards())
	}
	at := map[string]int{}
	for i, n := range nodes {
		s := fleet.Spot{Node: n.name, Exists: fits(p, n, false), Free: n.mem - n.memUsed, RAM: n.mem - n.memUsed,
			Short: n.cpu-n.cpuUsed < int64(p.CPUCores)}
		if p.GPUClass != "" {
			s.Free = n.gpus - n.gpuUsed
		}
		at[n.name] = i
		w.Spots = append(w.Spots, s)
	}
	for _, h := range hs {
		i, ok := at[h.node]
		if !ok {
			continue
		}
		h.Held = h.mem
		if p.GPUClass != "" {
			h.Held = h.gpus
		}
		h.Place(h.asked, waits)
		s := &w.Spots[i]
		switch {
		case h.Held == 0:
		case h.going:
			s.Going = append(s.Going, fleet.Going{ID: h.ID, Held: h.Held, For: h.givenFor})
		default: // the swap rule says which may go (fleet.Victims)
			s.Holders = append(s.Holders, h.Holder)
		}
	}
	return w
}

// giveable is what a node could give a new model: what the pods the swap
// rule would give back for a model that needs their room hold
// (fleet.Reclaimable), and those going already.
type giveable struct {
	mem, gpus int64
	pods      []string
}

// reclaimable is, by node, the room it could give a new model.
func (f *Fleet) reclaimable() map[string]giveable {
	f.mu.Lock()
	byName := f.known
	f.mu.Unlock()
	out := map[string]giveable{}
	for _, h := range f.holdings(byName) {
		if !h.going && (h.Min > 0 || !fleet.Reclaimable(h.Holder)) {
			continue
		}
		g := out[h.node]
		g.mem, g.gpus = g.mem+h.mem, g.gpus+h.gpus
		if !h.going {
			g.pods = append(g.pods, h.ID)
		}
		out[h.node] = g
	}
	return out
}

// makeRoom acts on what the fleet's one rule (fleet.MakeRoom) decides
// for m when it wants more pods than are placed, for its preferred
// profile (the one its wanted pods are asked of first: the others take
// only those the scheduler could not place). It returns the models given
// back (their Deployments are to be scaled to 0 before m's is scaled
// up), m's placement ("" when it waits for nothing of ours: there is
// room, or none can be made), and hold: m's Deployment is not to be
// raised past the pods placed, for the room it could take now is kept
// for models before it (keptBefore), or for the headroom.
func (f *Fleet) makeRoom(m catalog.Model, want int, models []catalog.Model, now time.Time) (given []catalog.Model, text string, hold bool) {
	if len(m.Profiles) == 0 || !f.wantsRoom(m, want) {
		f.setWaiting(m.Name, false)
		f.mu.Lock()
		if d, _ := f.demands.Of(m.Name); f.heldBack[m.Name] && m.Scaling.Min == 0 && d.Asked == 0 {
			// Given back, and its requests went away meanwhile: nobody
			// waits for it to come back.
			delete(f.heldBack, m.Name)
			f.demands.Forget(m.Name)
		}
		f.mu.Unlock()
		return nil, "", false
	}
	if first := f.aheadOf(m, models, now); first != "" {
		// Given back for a model asked for before it, and one asked for
		// before it waits still: its turn comes after.
		f.setWaiting(m.Name, false)
		return nil, fmt.Sprintf("%s: waiting for %s, asked for before it, to be placed", fleet.Making, first), false
	}
	p := keptProfile(m.Profiles[byPriority(m)[0]])
	nodes := f.room()
	byName := make(map[string]catalog.Model, len(models))
	for _, mm := range models {
		byName[mm.Name] = mm
	}
	all := f.holdings(byName)
	kept := f.keptBefore(m, models, nodes, all, now)
	asked := f.oldestAsk(m.Name)
	d := fleet.MakeRoom(m, []fleet.Want{roomWant(all, p, nodes, m.Name, asked)}, kept, now)
	f.setWaiting(m.Name, d.Waits)
	f.mu.Lock()
	if d.Until.IsZero() {
		delete(f.keptFrom, m.Name)
	} else {
		f.keptFrom[m.Name] = d.Until
	}
	f.mu.Unlock()
	if !d.Until.IsZero() {
		// Looked at again the moment the residency ends, not at a
		// resync.
		f.queue.AddAfter(m.Name, d.Until.Sub(now))
	}
	f.owe(m.Name, asked, d.Waited)
	if len(d.Victims) > 0 {
		given = f.giveBack(d.Victims, m, byName, now)
		f.log.Info("giving back models' pods to make room", "model", m.Name, "node", d.Node, "pods", podIDs(d.Victims))
	}
	if !d.Fits && d.Text == "" {
		if text := f.headroomText(m, p, nodes); text != "" {
			return nil, text, true
		}
	}
	return given, d.Text, d.Hold
}

// headroomText says why m's pod of p is held back from the room the
// headroom keeps free on nodes (Options.Headroom), node by node, when
// the scheduler, which counts only what pods request, would place it
// there: now, or once the node is idle while no node can ever host it
// with the headroom kept (as the local fleet says, "no node could ever
// host it"). "" when the headroom is not what holds it: the scheduler's
// own words say what does.
func (f *Fleet) headroomText(m catalog.Model, p catalog.Profile, nodes []node) string {
	var lines []string
	now, ever := false, false
	for _, n := range nodes {
		if n.room.Kept <= 0 {
			continue
		}
		all := n
		all.mem += n.room.Kept
		now = now || fits(p, all, true)
		ever = ever || fits(p, all, false)
		if n.mem < p.HostBytes() {
			lines = append(lines, fleet.KeptLine(n.name, p.HostBytes(), n.mem, n.room.Kept))
		} else {
			lines = append(lines, fmt.Sprintf("node %s: needs %s, %s free once %s is kept free for the system (--headroom)",
				n.name, words.Size(p.HostBytes()), words.Size(max(n.mem-n.memUsed, 0)), words.Size(n.room.Kept)))
		}
	}
	switch {
	case !f.hardwareExists(m) && ever:
		return "no node could ever host it, busy or idle:\n" + strings.Join(lines, "\n")
	case now:
		return strings.Join(lines, "\n")
	}
	return ""
}

// keptProfile is p as the room kept is counted by: its cards by the class
// the nodes' labels name.
func keptProfile(p catalog.Profile) catalog.Profile {
	p.GPUClass = classOf(p.GPUClass)
	return p
}

// keptBefore is the room the models whose turn comes before m's keep from
// it, by node, as the local fleet's pass keeps it: each that wants room,
// in turn (fleet.Turn: the critical first, then the first asked first),
// keeps what its pod will take where it fits now or where room is being
// made for it, and while it waits for busy pods to fall idle, what of the
// room it has now it cannot spare (fleet.Keeps). A model asked for later
// that took that room would otherwise hold it when the busy pods fall
// idle, and the first would wait for the later one's answers too. It is
// worked out afresh for each model, from the caches: a pass over one
// model sees what a pass over all would.
func (f *Fleet) keptBefore(m catalog.Model, models []catalog.Model, nodes []node, all []holding, now time.Time) *fleet.Kept {
	kept := &fleet.Kept{}
	for _, e := range f.inTurn(models) {
		if e.Name == m.Name {
			break
		}
		if len(e.Profiles) == 0 || f.isParked(e) || !f.wantsRoom(e, f.want(e, now)) ||
			f.isHeldBack(e.Name) && f.firstAhead(e, models, now) != "" {
			continue
		}
		p := keptProfile(e.Profiles[byPriority(e)[0]])
		w := roomWant(all, p, nodes, e.Name, f.oldestAsk(e.Name))
		// Where it fits now, it keeps what its pod will take: the pod is
		// not placed yet, and the room looks free (fleet.MakeRoom keeps
		// the rest).
		if d := fleet.MakeRoom(e, []fleet.Want{w}, kept, now); d.Fits {
			kept.Keep(d.Node, p, e, w.Need)
		}
	}
	return kept
}

// inTurn are models in the order they are given room (fleet.Turn).
func (f *Fleet) inTurn(models []catalog.Model) []catalog.Model {
	out := slices.Clone(models)
	asked := make(map[string]time.Time, len(out))
	for _, m := range out {
		asked[m.Name] = f.oldestAsk(m.Name)
	}
	slices.SortFunc(out, func(a, b catalog.Model) int { return fleet.Turn(a, b, asked[a.Name], asked[b.Name]) })
	return out
}

// isParked is whether m, as the catalog has it now, is parked.
func (f *Fleet) isParked(m catalog.Model) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	pk := f.parks[m.Name]
	return pk.reason != "" && pk.fingerprint == fleet.Fingerprint(m)
}

// giveBack forgets what was asked of the victims' models, so their
// Deployments fall to 0, and says why on each. Their pods are remembered
// as given back for m, all of them, since their Deployments lose them
// all: while they go, their room is m's, and the models asked for after
// m count it as coming back to them only once m is done with it.
func (f *Fleet) giveBack(victims []fleet.Holder, m catalog.Model, byName map[string]catalog.Model, now time.Time) []catalog.Model {
	pods := map[string][]*corev1.Pod{}
	for _, h := range victims {
		if pods[h.Model] == nil {
			pods[h.Model] = f.modelPods(h.Model)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.givenFor == nil {
		f.givenFor = map[string]string{}
	}
	for _, ps := range pods {
		for _, pod := range ps {
			if pod.DeletionTimestamp == nil {
				f.givenFor[pod.Name] = m.Name
			}
		}
	}
	var out []catalog.Model
	for _, h := range victims {
		reason, why := fleet.GiveBackWhy(h, m, now)
		f.lastStops[h.Model] = fleet.GivenBack{Replica: h.ID, For: m.Name, Why: why, At: now}
		f.givenWhy[h.Model] = why
		f.evictions[[2]string{h.Model, reason}]++
		if h.Busy || h.Min > 0 {
			// Asked for still, or kept by its Min: held at 0 until its
			// turn, its requests keeping their place.
			f.heldBack[h.Model] = true
		} else {
			f.demands.Forget(h.Model)
		}
		if !slices.ContainsFunc(out, func(x catalog.Model) bool { return x.Name == h.Model }) {
			out = append(out, byName[h.Model])
		}
	}
	return out
}

// oldestAsk is when model's oldest unanswered request was asked: the zero
// time for none (fleet.Asks).
func (f *Fleet) oldestAsk(model string) time.Time {
	return f.demands.Oldest(model)
}

func (f *Fleet) isHeldBack(model string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.heldBack[model]
}

// aheadOf is, for m held back, a model that waits for room and whose turn
// comes before m's (firstAhead). "" when none: m is held back no more.
func (f *Fleet) aheadOf(m catalog.Model, models []catalog.Model, now time.Time) string {
	if !f.isHeldBack(m.Name) {
		return ""
	}
	if first := f.firstAhead(m, models, now); first != "" {
		return first
	}
	f.mu.Lock()
	delete(f.heldBack, m.Name)
	f.mu.Unlock()
	return ""
}

// firstAhead is a model that waits for room and whose turn comes before
// m's (fleet.Behind): one kept by its Min, or asked for before m's oldest
// waiting request; "" when none.
func (f *Fleet) firstAhead(m catalog.Model, models []catalog.Model, now time.Time) string {
	mine := f.oldestAsk(m.Name)
	for _, o := range models {
		if o.Name == m.Name {
			continue
		}
		theirs, held := f.oldestAsk(o.Name), f.isHeldBack(o.Name)
		// Two held back with none asked are neither before the other.
		if theirs.IsZero() && held || !theirs.IsZero() && !fleet.Behind(mine, theirs) {
			continue
		}
		if f.wantsRoom(o, f.want(o, now)) {
			return o.Name
		}
	}
	return ""
}

func (f *Fleet) setMadeRoom(model string, made bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if made {
		f.madeRoom[model] = true
	} else {
		delete(f.madeRoom, model)
	}
}

// roomNow is whether a node has room for a pod of m's preferred profile
// now, as the scheduler counts it.
func (f *Fleet) roomNow(m catalog.Model) bool {
	if len(m.Profiles) == 0 {
		return false
	}
	p := m.Profiles[byPriority(m)[0]]
	return slices.ContainsFunc(f.room(), func(n node) bool { return fits(p, n, true) })
}

func (f *Fleet) setWaiting(model string, waits bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if waits {
		f.waiting[model] = true
	} else {
		delete(f.waiting, model)
		f.owed.Owe(model, time.Time{}, nil) // it waits on no pod
	}
}

// owe says model, whose oldest waiting request was asked at asked, waits
// on the busy pods waited (fleet.Waited): they take no request asked
// after it (Hold).
func (f *Fleet) owe(model string, asked time.Time, waited []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.owed.Owe(model, asked, waited)
}

func podIDs(hs []fleet.Holder) string {
	s := make([]string, len(hs))
	for i, h := range hs {
		s[i] = h.ID
	}
	return strings.Join(s, ", ")
}

// Evictions are the pods given back to make room since the fleet was
// made, by model and why, for /metrics (as fleet.Fleet.Evictions).
func (f *Fleet) Evictions() []fleet.Eviction {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]fleet.Eviction, 0, len(f.evictions))
	for k, n := range f.evictions {
		out = append(out, fleet.Eviction{Model: k[0], Reason: k[1], Count: n})
	}
	slices.SortFunc(out, func(a, b fleet.Eviction) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.Reason, b.Reason))
	})
	return out
}

// MemoryWaits are the waits for memory since the fleet was made, for
// /metrics (as fleet.Fleet.MemoryWaits): from the pass that first gave
// back pods for a model, or waited for them, to its pod's placing.
func (f *Fleet) MemoryWaits() fleet.WaitTally { return f.memWaits.Tally() }

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
// Which pods go is the local fleet's one rule (fleet.Victims): least
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
// once no model asked for before them waits for room.

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
	return mem >= p.RAMBytes && cpu >= int64(p.CPUCores) && gpus >= cards
}

// wantsRoom is whether m wants more pods than the scheduler has placed,
// for its Min or for requests waiting now: a request that went away
// before its pod was placed has nobody given back on its behalf.
func (f *Fleet) wantsRoom(m catalog.Model, want int) bool {
	f.mu.Lock()
	d := f.demands[m.Name]
	asked := d != nil && d.asks.Len() > 0
	f.mu.Unlock()
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
// room back already.
type holding struct {
	fleet.Holder
	node      string
	mem, gpus int64
	going     bool
}

// holdings are the fleet's pods bound to nodes, as the swap rule sees them
// for a model whose oldest waiting request was asked at waits (the zero
// time for none). byName is the catalog: a pod of a model no longer in
// it, of one no longer wanted (asked for by nobody lately, and kept by no
// Min), of one given back, or one its Deployment is losing, is going
// already.
//
// Busy is said of each pod: one answering a request (Hold), or not ready
// yet, or of a model with requests asked that no pod holds yet (they go
// to whichever of its pods frees first). A model with one pod streaming
// has its other pods idle.
func (f *Fleet) holdings(byName map[string]catalog.Model, waits time.Time) []holding {
	pods, _ := f.pods.Pods(f.opts.Namespace).List(labels.SelectorFromSet(labels.Set{labelManagedBy: managedBy}))
	var out []holding
	f.mu.Lock()
	defer f.mu.Unlock()
	held := map[string]int{}
	for _, pod := range pods {
		held[pod.Annotations[annotationModel]] += f.holds[pod.Name]
	}
	for _, pod := range pods {
		if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		_, mem, gpus := requests(pod, f.opts.GPUResource)
		name := pod.Annotations[annotationModel]
		m, ok := byName[name]
		d := f.demands[name]
		dr := f.drains[pod.Name]
		unrouted := d != nil && d.asks.Len() > held[name]
		h := holding{node: pod.Spec.NodeName, mem: mem, gpus: gpus,
			going: pod.DeletionTimestamp != nil || !ok || d == nil && m.Scaling.Min == 0 || f.heldBack[name] || dr != nil && dr.deployment != "",
			Holder: fleet.Holder{ID: pod.Name, Model: name, Class: m.ClassOrDefault(), Min: m.Scaling.Min,
				Busy: !isReady(pod) || f.holds[pod.Name] > 0 || unrouted}}
		var oldest time.Time
		if d != nil {
			h.LastUsed, oldest = d.lastUse, d.asks.Oldest()
		}
		h.Behind = isReady(pod) && fleet.Behind(oldest, waits)
		out = append(out, h)
	}
	return out
}

// holders are the holdings by node as the swap rule sees them, holding
// what a pod of p needs (memory, or cards), and what those going will
// give back on each node.
func holders(hs []holding, p catalog.Profile) (map[string][]fleet.Holder, map[string]int64) {
	out, going := map[string][]fleet.Holder{}, map[string]int64{}
	for _, h := range hs {
		h.Held = h.mem
		if p.GPUClass != "" {
			h.Held = h.gpus
		}
		switch {
		case h.Held == 0:
		case h.going:
			going[h.node] += h.Held
		default: // the swap rule says which may go (fleet.Victims)
			out[h.node] = append(out[h.node], h.Holder)
		}
	}
	return out, going
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
	for _, h := range f.holdings(byName, time.Time{}) {
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

// makeRoom gives back, by the swap rule, the idle on-demand models whose
// pods hold the room m needs for the pods it wants, when no node has room
// for one of its preferred profile (the one its wanted pods are asked of
// first: the others take only those the scheduler could not place). It returns the models given back (their Deployments are to be
// scaled to 0 before m's is scaled up) and what m waits for, "" when it
// waits for nothing of ours: there is room, or none can be made.
func (f *Fleet) makeRoom(m catalog.Model, want int, models []catalog.Model, now time.Time) (given []catalog.Model, text string) {
	if len(m.Profiles) == 0 || !f.wantsRoom(m, want) {
		f.setWaiting(m.Name, false)
		f.mu.Lock()
		if d := f.demands[m.Name]; f.heldBack[m.Name] && m.Scaling.Min == 0 && (d == nil || d.asks.Len() == 0) {
			// Given back, and its requests went away meanwhile: nobody
			// waits for it to come back.
			delete(f.heldBack, m.Name)
			delete(f.demands, m.Name)
		}
		f.mu.Unlock()
		return nil, ""
	}
	if first := f.aheadOf(m, models, now); first != "" {
		// Given back for a model asked for before it, and one asked for
		// before it waits still: its turn comes after.
		f.setWaiting(m.Name, false)
		return nil, fmt.Sprintf("making room: waiting for %s, asked for before it, to be placed", first)
	}
	p := m.Profiles[byPriority(m)[0]]
	nodes := f.room()
	for _, n := range nodes {
		if fits(p, n, true) {
			f.setWaiting(m.Name, false)
			return nil, ""
		}
	}
	byName := make(map[string]catalog.Model, len(models))
	for _, mm := range models {
		byName[mm.Name] = mm
	}
	hs, going := holders(f.holdings(byName, f.oldestAsk(m.Name)), p)
	var busyText string
	for _, n := range nodes {
		if !fits(p, n, false) {
			continue
		}
		have, need := n.mem-n.memUsed, p.RAMBytes
		if p.GPUClass != "" {
			have, need = n.gpus-n.gpuUsed, int64(p.Cards())
		}
		if have+going[n.name] >= need && going[n.name] > 0 {
			f.setWaiting(m.Name, false)
			return nil, fmt.Sprintf("making room on node %s: waiting for pods given back to stop", n.name)
		}
		victims, all, ok := fleet.Victims(hs[n.name], m, have, need)
		if !ok {
			if have+all+going[n.name] >= need && busyText == "" {
				var busy []string
				for _, h := range hs[n.name] {
					if h.Busy && h.Model != m.Name {
						busy = append(busy, h.ID)
					}
				}
				busyText = fmt.Sprintf("making room on node %s: waiting for %s to finish the requests %s",
					n.name, strings.Join(busy, ", "), words.Plural(len(busy), "it answers", "they answer"))
			}
			continue
		}
		if len(victims) == 0 {
			continue // its memory or cards would do; something else (its cores) is short
		}
		given = f.giveBack(victims, m, byName, now)
		f.setWaiting(m.Name, false)
		f.log.Info("giving back models' pods to make room", "model", m.Name, "node", n.name, "pods", podIDs(victims))
		return given, fmt.Sprintf("making room on node %s: giving back %s", n.name, podIDs(victims))
	}
	f.setWaiting(m.Name, busyText != "")
	return nil, busyText
}

// giveBack forgets what was asked of the victims' models, so their
// Deployments fall to 0, and says why on each.
func (f *Fleet) giveBack(victims []fleet.Holder, m catalog.Model, byName map[string]catalog.Model, now time.Time) []catalog.Model {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []catalog.Model
	for _, h := range victims {
		reason, why := fleet.GiveBackWhy(h, m, now)
		f.lastStops[h.Model] = h.ID + ": " + why
		f.givenWhy[h.Model] = why
		f.evictions[[2]string{h.Model, reason}]++
		if h.Busy || h.Min > 0 {
			// Asked for still, or kept by its Min: held at 0 until its
			// turn, its requests keeping their place.
			f.heldBack[h.Model] = true
		} else {
			delete(f.demands, h.Model)
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
	f.mu.Lock()
	defer f.mu.Unlock()
	if d := f.demands[model]; d != nil {
		return d.asks.Oldest()
	}
	return time.Time{}
}

func (f *Fleet) isHeldBack(model string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.heldBack[model]
}

// aheadOf is, for m held back, a model that waits for room and whose turn
// comes before m's (fleet.Behind): one kept by its Min, or asked for
// before m's oldest waiting request. "" when none: m is held back no more.
func (f *Fleet) aheadOf(m catalog.Model, models []catalog.Model, now time.Time) string {
	if !f.isHeldBack(m.Name) {
		return ""
	}
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
	f.mu.Lock()
	delete(f.heldBack, m.Name)
	f.mu.Unlock()
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
	}
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

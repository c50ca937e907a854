package fleet

import (
	"fmt"
	"strings"
	"time"

	"modelserve/catalog"
	"modelserve/internal/words"
)

// Making room is decided here, once, for both fleets: given what a model
// that wants a replica finds on each node for each of its profiles, it is
// placed now, replicas are given back for it, it waits for ones being
// given back to stop, or it waits for busy ones to fall idle or for a
// residency to end, and the sentence its placement says is the same on
// either backend. The controller gathers the nodes' room and acts on the
// decision through its backend: engines started or stopped locally, pods
// of Deployments on Kubernetes. Before it each fleet wrote the loop and
// its words, and they drifted.

// Spot is one node as a model that wants room finds it for one of its
// profiles. Free and Held count what the profile needs: bytes of RAM, or
// its class's cards.
type Spot struct {
	Node string
	// Exists is whether the node could host the profile were it idle
	// (CouldHost, the headroom kept).
	Exists bool
	// Free is what of the need is free now; RAM the node's free RAM,
	// which a profile on cards needs some of too; Short that something
	// else it needs (its cores) is short now.
	Free, RAM int64
	Short     bool
	// Going are the replicas being given back there already.
	Going []Going
	// Holders are the others holding any of it, as the swap rule sees
	// them for the asker (Held is what each holds of the need).
	Holders []Holder
}

// Going is a replica being given back, with what it holds of the need,
// and the model it was given back for ("" for none in particular: its
// room is whoever's needs it).
type Going struct {
	ID   string
	Held int64
	For  string
}

// Want is one profile of the asker with what it needs of it on a node
// (bytes of RAM, or cards) and the nodes as it finds them, in the order
// the fleet tries them.
type Want struct {
	Profile catalog.Profile
	Need    int64
	Spots   []Spot
}

// Decision is what the asker is to do, from the first of its wants that
// can do anything, in order.
type Decision struct {
	// Want and Spot index the want and the node decided on; Node is its
	// name; Fits that a replica is placed there now.
	Want, Spot int
	Node       string
	Fits       bool
	// Victims are the replicas to give back on Node for it.
	Victims []Holder
	// Waits is whether it waits for busy replicas to fall idle, for a
	// residency to end (Until) or for the models before it; Waited are
	// the busy replicas it waits on that answer requests asked before its
	// own (Waited), which take none asked after it meanwhile (Owed).
	Waits  bool
	Waited []string
	Until  time.Time
	// Text is its placement while room is made ("" when it fits, or none
	// can be made): what it waits for, or gives back, on which node.
	Text string
	// Hold is whether a replica of it waiting for the cluster's
	// scheduler would take room kept for models before it as that room
	// came free: it waits, and what it waits for is kept for others.
	Hold bool
}

// Making begins the placement text of a model room is made for: it is
// not unplaceable.
const Making = "making room"

// MakeRoom decides what asker does with wants, the room models before it
// in the pass keep (kept) not being its, as of now. Where room is made or
// waited for, asker keeps of the node's room what it needs (or, while it
// waits for busy holders, what it cannot spare: Keeps) from the models
// after it; where it fits, the fleet promises the room as it places it.
func MakeRoom(asker catalog.Model, wants []Want, kept *Kept, now time.Time) Decision {
	// Where it fits now: the node with the most of what it needs free.
	for wi, w := range wants {
		best := -1
		for i, s := range w.Spots {
			if fitsNow(w, s, kept) && (best < 0 || s.Free > w.Spots[best].Free) {
				best = i
			}
		}
		if best >= 0 {
			return Decision{Want: wi, Spot: best, Node: w.Spots[best].Node, Fits: true}
		}
	}
	var wait Decision
	var waitKeep func()
	claimedAny, othersAny := false, false
	for wi, w := range wants {
		p := w.Profile
		for si, s := range w.Spots {
			if !s.Exists {
				continue
			}
			need, claimed := w.Need, kept.Of(s.Node, p)
			claimedAny = claimedAny || claimed > 0
			have := s.Free - claimed
			// What is given back for asker, or for none in particular,
			// is its room as it goes (mine: for asker alone, which it
			// keeps already); what is given back for a model before it
			// comes back to it only once that one is done with it.
			var mine, othersHeld int64
			var others []int64
			var stopping, othersGoing []string
			for _, g := range s.Going {
				switch {
				case g.Held == 0:
				case g.For == "" || g.For == asker.Name:
					have += g.Held
					if g.For == asker.Name {
						mine += g.Held
					}
					stopping = append(stopping, g.ID)
				default:
					others = append(others, g.Held)
					othersHeld += g.Held
					othersGoing = append(othersGoing, g.ID)
				}
			}
			if have >= need && len(stopping) > 0 {
				kept.Keep(s.Node, p, asker, need-mine)
				return Decision{Want: wi, Spot: si, Node: s.Node,
					Text: fmt.Sprintf("%s on node %s: waiting for %s to stop", Making, s.Node, strings.Join(stopping, ", "))}
			}
			victims, all, ok := Victims(s.Holders, asker, have, need)
			if !ok {
				if have+claimed+all+othersHeld >= need && !wait.Waits {
					wait = Decision{Want: wi, Spot: si, Node: s.Node, Waits: true, Waited: Waited(s.Holders, asker),
						Text: waitText(asker, s, othersGoing, kept, p, now)}
					_, wait.Until = Residing(s.Holders, asker, now)
					node, amount := s.Node, Keeps(s.Holders, asker, have, claimed, need, others...)-mine
					waitKeep = func() { kept.Keep(node, p, asker, amount) }
					othersAny = len(others) > 0
				}
				continue
			}
			if len(victims) == 0 {
				continue // what it needs of memory or cards would do; its cores are short
			}
			// What the victims hold is its as they go: it keeps of the
			// rest only what that does not cover.
			for _, v := range victims {
				mine += v.Held
			}
			kept.Keep(s.Node, p, asker, need-mine)
			return Decision{Want: wi, Spot: si, Node: s.Node, Victims: victims,
				Text: fmt.Sprintf("%s on node %s: giving back %s", Making, s.Node, holderIDs(victims))}
		}
	}
	if wait.Waits {
		waitKeep()
		wait.Hold = claimedAny || othersAny
	}
	return wait
}

// fitsNow is whether a replica of w fits s now, less what the models
// before it keep there.
func fitsNow(w Want, s Spot, kept *Kept) bool {
	if s.Short || s.Free-kept.Of(s.Node, w.Profile) < w.Need {
		return false
	}
	return w.Profile.GPUClass == "" || s.RAM-kept.RAM(s.Node) >= w.Profile.HostBytes()
}

// waitText says what asker waits for on s: the residency of holders kept
// for it, else the busy ones and what of the room the models before it
// keep, else those models, else the replicas being given back for others
// (othersGoing).
func waitText(asker catalog.Model, s Spot, othersGoing []string, kept *Kept, p catalog.Profile, now time.Time) string {
	if why, _ := Residing(s.Holders, asker, now); why != "" {
		return fmt.Sprintf("%s on node %s: waiting: %s", Making, s.Node, why)
	}
	var busy []string
	answering := 0
	for _, h := range s.Holders {
		if giveFor(h, asker) == busyGive {
			busy = append(busy, h.ID)
			answering += h.Answering
		}
	}
	switch by := kept.For(s.Node); {
	case len(busy) > 0:
		// How many, when it knows: "the 3 requests it answers".
		requests := "the requests"
		switch {
		case answering == 1:
			requests = "the request"
		case answering > 1:
			requests = "the " + words.Count(answering, "request", "requests")
		}
		return fmt.Sprintf("%s on node %s: waiting for %s to finish %s %s%s",
			Making, s.Node, strings.Join(busy, ", "), requests, words.Plural(len(busy), "it answers", "they answer"), kept.Line(s.Node, p))
	case by != "":
		return fmt.Sprintf("%s on node %s: waiting behind %s", Making, s.Node, by)
	case len(othersGoing) > 0:
		return fmt.Sprintf("%s on node %s: waiting for %s, given back for models asked for before it, to stop", Making, s.Node, strings.Join(othersGoing, ", "))
	}
	return fmt.Sprintf("%s on node %s: waiting for room to be given back", Making, s.Node)
}

// KeptLine says why node, which may promise room bytes in all once kept
// bytes are kept free for the system (the headroom), cannot host a
// replica of need bytes however idle it is; both fleets say it so.
func KeptLine(node string, need, room, kept int64) string {
	if kept > 0 {
		return fmt.Sprintf("node %s: needs %s, it has %s in all once %s is kept free for the system (--headroom)", node, words.Size(need), words.Size(room), words.Size(kept))
	}
	return fmt.Sprintf("node %s: needs %s, it has %s in all", node, words.Size(need), words.Size(room))
}

func holderIDs(hs []Holder) string {
	s := make([]string, len(hs))
	for i, h := range hs {
		s[i] = h.ID
	}
	return strings.Join(s, ", ")
}

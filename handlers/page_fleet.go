package handlers

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/gateway"
	"modelserve/internal/plan"
	"modelserve/internal/words"
	"modelserve/views"
	"net/url"
)

// fleetPage shows the nodes and what each has free, the replicas the fleet
// runs on them and how each model fares, with the controls. With a fleet
// the page follows it live (fleetStream). Without one it shows the pool's
// nodes and keeps the replicas' place.
func (s *Server) fleetPage(w http.ResponseWriter, r *http.Request, v visit) {
	now := time.Now()
	p := s.fleetView(now, v.csrf, s.fleetCatalog(r.Context()), s.recentStarts(r.Context()))
	p.Layout = s.layout(v, "fleet", "Fleet")
	if p.HasFleet {
		p.Stream = "/fleet/stream"
	}
	q := r.URL.Query()
	if format, ok := fleetDone[q.Get("done")]; ok && q.Get("who") != "" && len(q.Get("who")) <= 200 {
		who := q.Get("who")
		p.Notice = fmt.Sprintf(format, who)
		if q.Get("done") == "restart" {
			// "Restarting" stays true only until the replica is ready: the
			// page's script says so once the stream shows it ready, and a
			// page loaded after that says so at once.
			p.NoticeUntilReady, p.NoticeReady = who, fmt.Sprintf(restartedReady, who)
			for _, rep := range p.Replicas {
				if rep.ID == who && rep.State.Key == "ready" {
					p.Notice = p.NoticeReady
				}
			}
		}
	}
	s.render(w, r, http.StatusOK, views.FleetPageView(p))
}

// fleetFigures are what the fleet page shows of the catalog's models, by
// name: each one's scaling, for the scale forms, and its speed.
type fleetFigures struct {
	scalings map[string]catalog.Scaling
	speeds   map[string]views.Speed
}

// fleetCatalog reads the catalog's models' figures for the fleet page;
// none when the catalog cannot be read, which costs the page its forms
// and is logged.
func (s *Server) fleetCatalog(ctx context.Context) fleetFigures {
	models, err := s.deps.Catalog.List(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.deps.Log.Error("reading the catalog for the fleet page", "err", err)
		}
		return fleetFigures{}
	}
	out := fleetFigures{scalings: make(map[string]catalog.Scaling, len(models)), speeds: s.speeds(ctx, models)}
	for _, m := range models {
		out.scalings[m.Name] = m.Scaling
	}
	return out
}

// fleetView is the fleet page as of now, from what the fleet, the pool and
// the gateway hold in memory; the catalog's figures and the engine starts,
// which live in the database, are read by the caller as often as it sees
// fit.
func (s *Server) fleetView(now time.Time, csrf string, figures fleetFigures, starts []fleet.Start) views.FleetPage {
	p := views.FleetPage{AsOf: timeText(now, now), CSRF: csrf}
	var pool []plan.Node
	if s.deps.Pool != nil {
		pool = s.deps.Pool.Nodes()
	}
	snap, hasFleet := s.snapshot()
	p.HasFleet = hasFleet
	var fleetNodes []fleet.NodeStatus
	if hasFleet {
		fleetNodes = s.deps.Fleet.Nodes()
	}
	p.Nodes = nodeViews(pool, fleetNodes, snap.replicas)
	hour, charted := s.hour()
	if charted {
		for i := range p.Nodes {
			p.Nodes[i].MemoryChart = nodeChart(p.Nodes[i].Name, hour)
		}
	}
	switch {
	case len(p.Nodes) > 0:
	case s.deps.Pool == nil && !hasFleet:
		p.NoPool = "No pool of nodes is configured, so there is nothing to show."
	default:
		p.NoPool = "The pool has no nodes: declare them in a nodes file, or let modelserve read this machine."
	}
	controls := s.deps.Controls != nil
	for _, rep := range snap.replicas {
		vm := replicaView(rep, now)
		live := rep.State != fleet.Stopping && rep.State != fleet.Stopped && rep.State != fleet.Failed
		vm.CanStop, vm.CanRestart = controls && live, controls && live
		p.Replicas = append(p.Replicas, vm)
	}
	var traffic map[string]gateway.Traffic
	if s.deps.Gateway != nil {
		traffic = s.deps.Gateway.Traffic()
	}
	for _, h := range snap.models {
		st, replicas := modelStatus(h)
		m := views.FleetModel{Name: h.Model, Class: h.Class, Replicas: replicas, Status: st, Parked: h.Parked, CanControl: controls, LastStop: h.LastStop}
		if h.Parked {
			m.Reason = h.Reason
		} else if h.Placement != "" {
			m.Placement = strings.Split(h.Placement, "\n")
		}
		m.Speed = figures.speeds[h.Model]
		if sc, ok := figures.scalings[h.Model]; ok {
			m.CanScale, m.Min, m.Max = true, sc.Min, sc.UpTo()
			m.IdleDefault = words.Span(catalog.DefaultIdleAfter)
			if sc.IdleAfter > 0 {
				m.IdleAfter = words.Span(sc.IdleAfter)
			}
		}
		if s.deps.Gateway != nil {
			m.Requests, _ = trafficText(traffic[h.Model])
			if charted {
				m.Charts = modelCharts(h.Model, hour)
			}
		}
		p.Models = append(p.Models, m)
	}
	for _, st := range starts {
		p.Starts = append(p.Starts, startView(st, now))
	}
	p.Swaps = swapViews(snap.models, starts, now)
	return p
}

// nodeViews are the pool's nodes, each with the fleet's figures when the
// fleet runs it, then the fleet's nodes the pool does not list.
func nodeViews(pool []plan.Node, fleetNodes []fleet.NodeStatus, reps []fleet.Replica) []views.Node {
	byName := map[string]fleet.NodeStatus{}
	for _, n := range fleetNodes {
		byName[n.Name] = n
	}
	byID := map[string]fleet.Replica{}
	for _, r := range reps {
		byID[r.ID] = r
	}
	var out []views.Node
	for _, n := range pool {
		vm := nodeView(n)
		if fn, ok := byName[n.Name]; ok {
			withFleet(&vm, fn, byID)
			delete(byName, n.Name)
		}
		out = append(out, vm)
	}
	for _, fn := range fleetNodes {
		if _, left := byName[fn.Name]; !left {
			continue
		}
		vm := views.Node{Name: fn.Name, CPU: fmt.Sprintf("%d %s", fn.CPUCores, words.Plural(fn.CPUCores, "core", "cores"))}
		withFleet(&vm, fn, byID)
		out = append(out, vm)
	}
	return out
}

func nodeView(n plan.Node) views.Node {
	vm := views.Node{
		Name: n.Name, Local: n.Local, CPU: fmt.Sprintf("%d %s, %.0f GB/s to memory", n.CPUCores, words.Plural(n.CPUCores, "core", "cores"), n.CPUBandwidthGBs),
		RAM: words.Size(n.RAMBytes), FreeRAM: words.Size(n.FreeRAMBytes), Note: n.Note,
		Memory: usageBar("RAM", n.RAMBytes, n.FreeRAMBytes),
	}
	for _, g := range n.GPUs {
		bw := fmt.Sprintf("%.0f GB/s", g.BandwidthGBs)
		if g.BandwidthEstimated {
			bw += " (estimated)"
		}
		ng := views.NodeGPU{Class: g.Class, Count: fmt.Sprint(g.Count), Memory: words.Size(g.MemoryBytes), Bandwidth: bw}
		for i, free := range g.FreeBytes {
			ng.Bars = append(ng.Bars, usageBar(fmt.Sprintf("%s #%d", g.Class, i), g.MemoryBytes, free))
		}
		vm.GPUs = append(vm.GPUs, ng)
	}
	return vm
}

// withFleet puts the fleet's figures on a node: its memory as the fleet
// counts it (what is free for another replica, once what is promised to
// those loading is counted), split by replica, and who holds each card.
func withFleet(vm *views.Node, n fleet.NodeStatus, reps map[string]fleet.Replica) {
	vm.RAM, vm.FreeRAM = words.Size(n.RAMBytes), words.Size(n.FreeBytes)
	vm.Memory = replicaBar(n, reps)
	vm.Cards = nil
	for _, c := range n.GPUs {
		vm.Cards = append(vm.Cards, views.NodeCard{Name: fmt.Sprintf("#%d %s, %s", c.Index, c.Class, words.Size(c.MemoryBytes)), Holder: c.Replica})
	}
}

// replicaBar is a node's RAM split by replica (what each uses once
// measured, what it was placed by before), then what else is used, then
// what is kept free for the system (the headroom, never promised), then
// what is free for another replica.
func replicaBar(n fleet.NodeStatus, reps map[string]fleet.Replica) views.Bar {
	if n.RAMBytes <= 0 {
		return views.Bar{Label: "RAM", Text: "not known"}
	}
	total := float64(n.RAMBytes)
	b := views.Bar{Label: "RAM", Capacity: 100}
	var used int64
	var said []string
	for i, id := range n.Replicas {
		r, ok := reps[id]
		if !ok {
			continue // it ended between the two looks
		}
		mem, how := replicaMemory(r)
		used += mem
		b.Parts = append(b.Parts, views.BarPart{
			Name: id, Key: fmt.Sprintf("replica-%d", i%4+1), Share: float64(mem) * 100 / total, Text: words.Size(mem) + " " + how,
		})
		said = append(said, fmt.Sprintf("%s %s %s", id, words.Size(mem), how))
	}
	free := min(max(n.FreeBytes, 0), n.RAMBytes)
	other := n.RAMBytes - used - free
	kept := min(max(n.HeadroomBytes, 0), max(other, 0))
	if other -= kept; other > 0 {
		b.Parts = append(b.Parts, views.BarPart{Name: "other", Key: "used", Share: float64(other) * 100 / total, Text: words.Size(other)})
		said = append(said, words.Size(other)+" other programs and room held for replicas loading")
	}
	if kept > 0 {
		b.Parts = append(b.Parts, views.BarPart{Name: "kept free", Key: "kept", Share: float64(kept) * 100 / total, Text: words.Size(kept)})
	}
	b.Parts = append(b.Parts, views.BarPart{Name: "free", Key: "free", Share: float64(free) * 100 / total, Text: words.Size(free)})
	if len(n.Replicas) == 0 {
		said = append([]string{"no replicas"}, said...)
	}
	b.Text = fmt.Sprintf("%s; %s free of %s", strings.Join(said, ", "), words.Size(free), words.Size(n.RAMBytes))
	if n.HeadroomBytes > 0 {
		// Said whole even when the kernel's own use has eaten into it:
		// it is the rule, not a part that happens to be empty.
		b.Text += fmt.Sprintf(", %s kept free for the system", words.Size(n.HeadroomBytes))
	}
	if used > n.RAMBytes {
		b.Over, b.Capacity = true, total*100/float64(used)
		for i := range b.Parts {
			b.Parts[i].Share = b.Parts[i].Share * b.Capacity / 100
		}
	}
	return b
}

// replicaMemory is what a replica uses: its resident memory once
// measured, else the estimate it was placed by.
func replicaMemory(r fleet.Replica) (int64, string) {
	if r.RSSBytes > 0 {
		return r.RSSBytes, "measured"
	}
	return r.EstimateBytes, "estimated"
}

func replicaView(r fleet.Replica, now time.Time) views.FleetReplica {
	vm := views.FleetReplica{
		ID: r.ID, Model: r.Model, Profile: r.Profile, Engine: fleet.EngineTitle(r.Engine), Node: r.Node, Endpoint: r.Endpoint,
		State: views.StateOf(string(r.State)), Detail: r.Detail, Failures: r.Failures, LastError: r.LastError, Log: r.Log,
	}
	if !r.Started.IsZero() {
		vm.Started, vm.StartedISO = timeText(r.Started, now), r.Started.UTC().Format(time.RFC3339)
		if !r.ReadyAt.IsZero() {
			vm.ReadyIn = durationText(r.ReadyAt.Sub(r.Started))
		}
	}
	switch {
	case r.RSSBytes > 0:
		vm.Memory = fmt.Sprintf("%s resident; estimated %s", words.Size(r.RSSBytes), words.Size(r.EstimateBytes))
		vm.MemoryGlance = words.Size(r.RSSBytes)
	case r.EstimateBytes > 0:
		vm.Memory = fmt.Sprintf("estimated %s; measured once ready", words.Size(r.EstimateBytes))
		vm.MemoryGlance = "≈ " + words.Size(r.EstimateBytes)
	default:
		vm.Memory, vm.MemoryGlance = "not known", "not known"
	}
	if l := r.Load; l != nil {
		vm.Load, vm.Busy = loadText(*l), busyText(*l)
		if l.Size.Sized() {
			vm.Size = sizeGlance(l.Size)
		}
	}
	if r.PID > 0 {
		vm.Process, vm.PID = fmt.Sprintf("pid %d", r.PID), fmt.Sprint(r.PID)
		if r.Threads > 0 {
			// The engine's --threads, which the fleet chose: the process
			// runs more (its HTTP threads, the runtime's), so "1 thread"
			// beside a process of 15 read as a wrong count.
			vm.Process += fmt.Sprintf(", started with --threads %d", r.Threads)
		}
	}
	return vm
}

// modelStatus is how the fleet fares with a model, as a state and its
// replicas in words ("1 of 1 ready").
func modelStatus(h fleet.ModelHealth) (views.State, string) {
	st := h.Status()
	if st == "on demand" {
		return views.StateOf(st), fmt.Sprintf("%d ready, none wanted now", h.Ready)
	}
	return views.StateOf(st), fmt.Sprintf("%d of %d ready", h.Ready, h.Want)
}

// usageBar is memory in use against free, in bytes.
func usageBar(label string, total, free int64) views.Bar {
	if total <= 0 {
		return views.Bar{Label: label, Text: "not known"}
	}
	free = min(max(free, 0), total)
	used := total - free
	return views.Bar{
		Label: label, Capacity: 100,
		Parts: []views.BarPart{
			{Name: "in use", Key: "used", Share: float64(used) * 100 / float64(total), Text: words.Size(used)},
			{Name: "free", Key: "free", Share: float64(free) * 100 / float64(total), Text: words.Size(free)},
		},
		Text: fmt.Sprintf("%s in use, %s free of %s", words.Size(used), words.Size(free), words.Size(total)),
	}
}

// busyText is an engine's slots in use, for a row: "1/4 busy", "4/4
// busy, 2 waiting".
func busyText(l fleet.Load) string {
	text := fmt.Sprintf("%d/%d busy", l.SlotsBusy, l.Size.Slots)
	if l.Deferred > 0 {
		text += fmt.Sprintf(", %d waiting", l.Deferred)
	}
	return text
}

// loadText is what an engine says of its work, in words.
func loadText(l fleet.Load) string {
	waiting := "none waiting"
	if l.Deferred > 0 {
		waiting = fmt.Sprintf("%d waiting", l.Deferred)
	}
	text := fmt.Sprintf("%d of %d %s busy, %s", l.SlotsBusy, l.Size.Slots, words.Plural(l.Size.Slots, "slot", "slots"), waiting)
	if ctx := l.Size.Context(); ctx > 0 {
		text += fmt.Sprintf("; %d tokens a slot", ctx)
	}
	if l.KVCacheUsage != nil {
		text += "; KV cache " + words.Percent(*l.KVCacheUsage) + " full"
	}
	if seen := l.PromptTokens + l.CachedTokens; seen > 0 || l.PredictedTokens > 0 {
		text += fmt.Sprintf("; %d prompt tokens read (%s from its cache), %d generated",
			seen, words.Percent(float64(l.CachedTokens)/float64(max(seen, 1))), l.PredictedTokens)
	}
	return text
}

// startView is one engine start with its memory, estimated and measured.
func startView(st fleet.Start, now time.Time) views.FleetStart {
	vm := views.FleetStart{
		Replica: st.Replica, File: filepath.Base(st.File),
		Ready: timeText(st.ReadyAt, now), ReadyISO: st.ReadyAt.UTC().Format(time.RFC3339),
		Context: sizeGlance(st.Size), ContextWords: st.Size.Words(),
		Estimate: words.Size(st.EstimateBytes), Measured: words.Size(st.RSSBytes),
	}
	switch {
	case st.RSSBytes <= 0 || st.EstimateBytes <= 0:
		vm.Error = "not known"
	case st.RSSBytes > st.EstimateBytes:
		vm.Error = "measured " + words.Percent(float64(st.RSSBytes-st.EstimateBytes)/float64(st.EstimateBytes)) + " over"
	default:
		vm.Error = "measured " + words.Percent(float64(st.EstimateBytes-st.RSSBytes)/float64(st.EstimateBytes)) + " under"
	}
	return vm
}

// fleetDone is what the fleet page says after a control, by the word the
// control redirects with: the page builds the sentence, so a link cannot
// make it say anything else.
var fleetDone = map[string]string{
	"stop":    "%s is stopping. If its model still wants as many replicas, the fleet places a new one; scale the model down to run fewer.",
	"restart": "%s is restarting; the list below shows when it is ready again.",
	"scale":   "%s is scaled; the fleet starts or stops replicas to match.",
	"unpark":  "%s is unparked; the fleet starts it again when the catalog wants it.",
}

// restartedReady is the restart's notice once the replica is ready again.
const restartedReady = "%s restarted and is ready again."

// toFleet sends the browser back to the fleet page after a control, saying
// what was done to whom.
func toFleet(w http.ResponseWriter, r *http.Request, done, who string) {
	q := url.Values{"done": {done}, "who": {who}}
	http.Redirect(w, r, "/fleet?"+q.Encode(), http.StatusSeeOther)
}

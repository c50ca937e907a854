package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/gateway"
	"modelserve/internal/hf"
	"modelserve/internal/updates"
	"modelserve/internal/words"
	"modelserve/views"
)

// catalogWindow is how many models the catalog page shows at once: each
// is a row with its details, read from the watcher and the speeds, and
// drawn before the first byte goes.
const catalogWindow = 25

// catalogPage lists the catalog's models, catalogWindow at a time: ?after=
// (a model's name) shows those after it. ?removed= and ?checked= name a
// model just removed or checked, for the page to say so.
func (s *Server) catalogPage(w http.ResponseWriter, r *http.Request, v visit) {
	q := r.URL.Query()
	s.renderCatalog(w, r, v, q.Get("removed"), q.Get("checked"))
}

func (s *Server) renderCatalog(w http.ResponseWriter, r *http.Request, v visit, removed, checked string) {
	after, err := catalogAfter(r)
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	read, err := s.readCatalog(r.Context(), after, checked)
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	p := s.catalogNow(read, s.publicBase(r), time.Now())
	p.Layout = s.layout(v, "catalog", "Catalog")
	p.Stream = "/catalog/stream"
	if read.after != "" {
		p.Stream += "?" + url.Values{"after": {read.after}}.Encode()
	}
	for i, m := range read.models {
		// Said only of a model the catalog has, and as its last check
		// stands: a link cannot make the page claim a check.
		if m.Name == checked && read.watch[i].LastCheck != nil {
			p.Notice = "Checked " + m.Name + ": " + lastCheckText(read.watch[i], time.Now()) + "."
		}
	}
	// Said only of a name the catalog could hold and does not, whichever
	// window the page shows: a link cannot make the page claim a model it
	// has was removed.
	if removed != "" && len(removed) <= 64 && strings.Trim(removed, "abcdefghijklmnopqrstuvwxyz0123456789._-") == "" {
		if _, err := s.deps.Catalog.Get(r.Context(), removed); errors.Is(err, catalog.ErrNotFound) {
			p.Notice = removed + " was removed from the catalog."
		}
	}
	s.render(w, r, http.StatusOK, views.CatalogPageView(p))
}

// catalogRead is what the catalog page shows that lives in the database:
// a window of the models (those after after), what the watcher knows of
// each, and their speeds, and where the window stands in the catalog. The
// page's stream reads it again now and then, not at every look.
type catalogRead struct {
	models []catalog.Model
	watch  []updates.Status
	speeds map[string]views.Speed
	after  string
	// before is how many models come before the window, total how many
	// the catalog has, more whether any follow the window.
	before, total int
	more          bool
}

// catalogAfter is the page's ?after=: "" for the first window.
func catalogAfter(r *http.Request) (string, error) {
	after, _, err := modelCursor(r, catalogWindow, "the catalog is")
	return after, err
}

// readCatalog reads the window after after; holding, when after is "",
// is a model the window should show wherever it is in the catalog (the
// one just checked, whose page says how its check went).
func (s *Server) readCatalog(ctx context.Context, after, holding string) (catalogRead, error) {
	page, err := s.deps.Catalog.Page(ctx, catalog.PageQuery{After: after, Limit: catalogWindow, Holding: holding})
	if err != nil {
		return catalogRead{}, err
	}
	// The watcher and the speeds are read for the window alone: each
	// model costs them a read.
	watch, err := s.deps.Updates.Statuses(ctx, page.Models)
	if err != nil {
		return catalogRead{}, err
	}
	return catalogRead{models: page.Models, watch: watch, speeds: s.speeds(ctx, page.Models),
		after: page.After, before: page.Before, total: page.Total, more: page.More}, nil
}

// catalogNow is the catalog as of now: read's models with what the fleet
// and the gateway hold in memory of each.
func (s *Server) catalogNow(read catalogRead, base string, now time.Time) views.CatalogPage {
	p := views.CatalogPage{TrafficWindow: "last minute"}
	if read.before > 0 || read.more {
		p.Window = fmt.Sprintf("models %d to %d of %d", read.before+1, read.before+len(read.models), read.total)
		if len(read.models) == 0 {
			p.Window = fmt.Sprintf("none of the %d models: none comes after %s", read.total, read.after)
		}
		if read.before > 0 {
			p.First = "/catalog"
		}
		if read.more {
			p.Next = "/catalog?" + url.Values{"after": {read.models[len(read.models)-1].Name}}.Encode()
		}
	}
	snap, hasFleet := s.snapshot()
	health := map[string]fleet.ModelHealth{}
	for _, h := range snap.models {
		health[h.Model] = h
	}
	var traffic map[string]gateway.Traffic
	if s.deps.Gateway != nil {
		traffic = s.deps.Gateway.Traffic()
	}
	hour, charted := s.hour()
	for i, m := range read.models {
		vm := catalogView(s.shownModel(m))
		vm.Speed = read.speeds[m.Name]
		vm.Watch, vm.CheckURL, vm.UpdateURL = watchText(read.watch[i], now), checkURL(read.watch[i]), updateURL(read.watch[i])
		if hasFleet {
			h, looked := health[m.Name]
			vm.Running = runningText(h, looked)
			if looked {
				vm.Status, _ = modelStatus(h)
				vm.Replicas = fmt.Sprintf("%d/%d", h.Ready, h.Want)
			}
		}
		if s.deps.Gateway != nil {
			vm.Traffic, vm.Latency = trafficText(traffic[m.Name])
			if charted {
				vm.Charts = modelCharts(m.Name, hour)
			}
			vm.Playground = playgroundURL(m.Name)
		}
		vm.CallIt = callItView(base, m, s.tokenCreate)
		if m.Canary != nil {
			// Reached through its model, by its share: no client calls it.
			vm.Playground = ""
		}
		p.Models = append(p.Models, vm)
	}
	return p
}

func catalogView(m catalog.Model) views.CatalogModel {
	vm := views.CatalogModel{
		Name: m.Name, Aliases: strings.Join(m.Aliases, ", "), Description: m.Description, Source: m.Source,
		Context: fmt.Sprintf("%d tokens", m.ContextLength), Class: m.ClassOrDefault(), Role: m.Role,
		// Replicas running are the fleet's to say: this is what is said
		// without one.
		Running:   "running — (no fleet yet)",
		RemoveURL: "/catalog/" + url.PathEscape(m.Name) + "/remove",
		Evals:     evalsURL(m.Name),
	}
	if m.Origin != nil {
		vm.Repo, vm.Commit = m.Origin.Repo, hf.Short(m.Origin.Revision)
		if m.Canary == nil {
			vm.VersionsURL = versionsURL(m.Name)
		}
	}
	if c := m.Canary; c != nil {
		// Judged by its model's suite.
		vm.Evals = evalsURL(c.Of)
		vm.Trial = "new version of " + c.Of + " on trial: " + words.Percent(c.Share) + " of its requests"
		vm.TrialTag = "canary, " + words.Percent(c.Share)
		if c.Share == 0 {
			vm.Trial = "new version of " + c.Of + " on trial: none of its requests until its eval has passed"
			vm.TrialTag = "canary, no traffic yet"
		}
	}
	vm.Size = fmt.Sprint(m.ContextLength)
	if len(m.Profiles) > 0 {
		first := firstProfile(m)
		if first.Sized() {
			vm.Size = sizeGlance(first.Size)
		}
		vm.Memory = memoryGlance(first)
	}
	switch {
	case m.Scaling.Min == 0:
		vm.Wanted = fmt.Sprintf("on demand, up to %d", m.Scaling.UpTo())
	case m.Scaling.Max > m.Scaling.Min:
		vm.Wanted = fmt.Sprintf("%d to %d", m.Scaling.Min, m.Scaling.Max)
	default:
		vm.Wanted = fmt.Sprint(m.Scaling.Min)
	}
	if m.Scaling.UpTo() > m.Scaling.Min {
		vm.IdleAfter = "idle after " + durationText(catalog.DefaultIdleAfter) + " (the default)"
		if d := m.Scaling.IdleAfter; d > 0 {
			vm.IdleAfter = "idle after " + durationText(d)
		}
	}
	for _, p := range m.Profiles {
		hw := "CPU"
		if p.GPUClass != "" {
			hw = fmt.Sprintf("%d×%s", max(p.GPUsPerNode, 1), p.GPUClass)
			if p.Nodes > 1 {
				hw = fmt.Sprintf("%d nodes × %s", p.Nodes, hw)
			}
		}
		vm.Profiles = append(vm.Profiles, views.CatalogProfile{Name: p.Name, Engine: p.Engine, Hardware: hw, Runs: runsText(p)})
	}
	caps := []string{"chat"}
	switch {
	case m.Role == catalog.RoleGuard:
		caps = []string{"judge"}
		if m.Guard != nil {
			caps[0] += " (" + m.Guard.Format + ")"
		}
	case m.Capabilities.Embeddings:
		caps = []string{"embeddings"}
	}
	if m.Capabilities.Vision {
		caps = append(caps, "vision")
	}
	if m.Capabilities.Tools {
		caps = append(caps, "tools")
	}
	vm.Capabilities = caps
	return vm
}

// sizeGlance is a size as a table's cell says it: the tokens a request
// may use × the requests at once ("8192 × 4"); "—" for an engine's own.
// Its sentence is catalog.Size.Words.
func sizeGlance(s catalog.Size) string {
	if !s.Sized() {
		return "—"
	}
	return fmt.Sprintf("%d × %d", s.Context(), max(s.Slots, 1))
}

// memoryGlance is what a profile holds, in a few characters: "937.9 MB
// RAM", "9.6 GB × 2 cards", both when it takes both. A figure keeps its
// unit on its line in a narrow cell.
func memoryGlance(p catalog.Profile) string {
	var parts []string
	size := func(b int64) string { return strings.ReplaceAll(words.Size(b), " ", "\u00a0") }
	if p.CardBytes > 0 {
		card := size(p.CardBytes)
		if n := p.Cards(); n > 1 {
			card += fmt.Sprintf(" × %d cards", n)
		} else {
			card += " card"
		}
		parts = append(parts, card)
	}
	if p.RAMBytes > 0 {
		parts = append(parts, size(p.RAMBytes)+" RAM")
	}
	if len(parts) == 0 {
		return "not known"
	}
	return strings.Join(parts, " + ")
}

// trafficText is a model's last minute at the gateway in a few words: "12
// requests, 1 failed" and its median latency, "340 ms".
func trafficText(t gateway.Traffic) (requests, latency string) {
	if t.Requests == 0 {
		return "none", ""
	}
	requests = words.Count(t.Requests, "request", "requests")
	if t.Failed > 0 {
		requests += fmt.Sprintf(", %d failed", t.Failed)
	}
	if t.Answered > 0 {
		latency = latencyText(t.P50)
	}
	return requests, latency
}

// runningText is how the fleet fares with a model, in a few words: "1 of 1
// ready", "parked: <reason>", "0 of 1 ready, waiting for room". A model
// added a moment ago has no health until the fleet has looked at it.
func runningText(h fleet.ModelHealth, looked bool) string {
	if !looked {
		return "not looked at by the fleet yet"
	}
	st, replicas := modelStatus(h)
	switch st.Word {
	case "parked":
		return "parked: " + h.Reason
	case "ready", "on demand":
		return replicas
	}
	return replicas + ", " + st.Word
}

// catalogRemove removes a model once confirmed: with JavaScript, hx-confirm
// has asked and the form says confirm=yes; without, this asks on a page of
// its own first.
func (s *Server) catalogRemove(w http.ResponseWriter, r *http.Request, v visit) {
	name := r.PathValue("name")
	if r.PostFormValue("confirm") != "yes" {
		if _, err := s.deps.Catalog.Get(r.Context(), name); err != nil {
			s.pageError(w, r, v, err)
			return
		}
		s.render(w, r, http.StatusOK, views.ConfirmPage(views.Confirm{
			Layout: s.layout(v, "catalog", "Remove "+name), Heading: "Remove " + name + "?",
			Text:   "Its replicas stop and requests for it are refused. The files stay on the mirror, and a job can add it again.",
			Action: "/catalog/" + url.PathEscape(name) + "/remove", Button: "Remove " + name, Cancel: "/catalog",
		}))
		return
	}
	if err := s.deps.Catalog.Remove(r.Context(), name); err != nil {
		s.pageError(w, r, v, err)
		return
	}
	s.deps.Log.Info("model removed from the catalog", "model", name, "user", v.user)
	http.Redirect(w, r, "/catalog?removed="+url.QueryEscape(name), http.StatusSeeOther)
}

// watchText is what the watcher for new weights knows of a model, in a
// sentence: why it is not watched, or its branch and last check ("branch
// main: checked 5 min ago, up to date at abc1234").
func watchText(st updates.Status, now time.Time) string {
	if !st.Watched {
		return st.NotWatched
	}
	text := "branch " + st.Ref + ": "
	if st.LastCheck == nil {
		text += "not checked yet"
	} else {
		text += lastCheckText(st, now)
	}
	if st.NextCheck.IsZero() {
		return text + "; no checks on a schedule (its interval is 0)"
	}
	return text
}

// lastCheckText is a model's last check in a few words: "checked 5 min
// ago, up to date at abc1234".
func lastCheckText(st updates.Status, now time.Time) string {
	c := st.LastCheck
	when := agoText(now.Sub(c.At))
	switch c.Result {
	case updates.ResultUpToDate:
		return "checked " + when + ", up to date at " + hf.Short(c.Commit)
	case updates.ResultUpdateAvailable:
		return "checked " + when + ", new weights at " + hf.Short(c.Commit)
	}
	return "the check " + when + " failed: " + c.Error
}

// agoText is how long ago something was, to the minute: "just now", "5
// min ago", "2 h 5 min ago".
func agoText(d time.Duration) string {
	if d < time.Minute {
		return "just now"
	}
	return durationText(d.Truncate(time.Minute)) + " ago"
}

// checkURL is the Check now form's action for a model watched, "" for
// one not.
func checkURL(st updates.Status) string {
	if !st.Watched {
		return ""
	}
	return "/catalog/" + url.PathEscape(st.Model) + "/check"
}

// updateURL is the page of the update available to a model, "" when
// there is none.
func updateURL(st updates.Status) string {
	if st.Available == nil {
		return ""
	}
	return "/updates/" + strconv.FormatInt(st.Available.ID, 10)
}

// runsText says how a profile runs: "a 16384-token pool in 4 slots of 4096
// tokens; 1.2 GB of RAM" or "...; 9.6 GB on each of 2 cards".
func runsText(p catalog.Profile) string {
	var parts []string
	if p.Pool > 0 {
		parts = append(parts, fmt.Sprintf("a %d-token pool in %s of %d tokens", p.Pool, words.Count(max(p.Slots, 1), "slot", "slots"), p.Context()))
	}
	if p.CardBytes > 0 {
		each := "on its card"
		if p.Cards() > 1 {
			each = fmt.Sprintf("on each of %d cards", p.Cards())
		}
		parts = append(parts, words.Size(p.CardBytes)+" "+each)
	}
	if p.RAMBytes > 0 {
		parts = append(parts, words.Size(p.RAMBytes)+" of RAM")
	}
	if p.Embeddings {
		parts = append(parts, "embeddings")
	}
	switch {
	case p.Judge:
		parts = append(parts, "no prompt cache (a judge)")
	case p.PromptCacheBytes > 0:
		parts = append(parts, "a prompt cache of "+words.Size(p.PromptCacheBytes))
	}
	return strings.Join(parts, "; ")
}

// versionsURL is a model's version history page.
func versionsURL(name string) string { return "/catalog/" + url.PathEscape(name) + "/versions" }

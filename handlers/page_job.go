package handlers

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"modelserve/catalog"
	"modelserve/internal/hf"
	"modelserve/internal/mirror"
	"modelserve/internal/words"
	"modelserve/jobs"
	"modelserve/views"
)

// stepOrder are the seven steps, as the job page lists them whether the job
// has reached them or not.
var stepOrder = []string{jobs.StepRegistry, jobs.StepPlan, jobs.StepMirror, jobs.StepCheck,
	jobs.StepCatalog, jobs.StepPlacement, jobs.StepSmoke}

// jobPage shows a job. While it runs, its live part follows the job's
// event stream; once it has ended there is nothing to follow.
func (s *Server) jobPage(w http.ResponseWriter, r *http.Request, v visit) {
	j, err := s.deps.Jobs.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	stream := ""
	if !j.Ended() {
		stream = "/jobs/" + url.PathEscape(j.ID) + "/stream"
	}
	title := "Job " + j.ID
	if j.Model != "" {
		title = j.Model + " · job"
	}
	now := time.Now()
	vm := jobView(j, now, v.csrf, nil)
	vm.TraceID, vm.TraceURL = j.TraceID, traceLink(s.deps.TraceURL, j.TraceID)
	s.events.rates.fill(j.ID, mirrorProgress(&vm), now)
	s.withCallIt(r, j, &vm)
	s.withOffers(r, j, &vm)
	s.render(w, r, http.StatusOK, views.JobPageView(views.JobPage{
		Layout: s.layout(v, "jobs", title), Job: vm, Stream: stream,
	}))
}

// withCallIt adds to a job that served a model the model's playground and
// how to call it, while the catalog has the model: a model removed since
// is not there to call.
func (s *Server) withCallIt(r *http.Request, j jobs.Job, vm *views.Job) {
	if j.State != jobs.Done || j.Model == "" {
		return
	}
	name := j.Model
	if vm.Of != "" {
		// A promoted version is its model now: the version's own name is
		// gone.
		name = vm.Of
	}
	m, err := s.deps.Catalog.Get(r.Context(), name)
	if err != nil {
		// Removed since, or unreadable: the page shows the job without.
		if !errors.Is(err, catalog.ErrNotFound) && r.Context().Err() == nil {
			s.deps.Log.Error("reading a served model for its job page", "model", name, "err", err)
		}
		return
	}
	c := callItView(s.publicBase(r), m, s.tokenCreate)
	vm.CallIt = &c
	if s.deps.Gateway != nil {
		vm.Playground = playgroundURL(m.Name)
	}
}

// jobView is a job as its page shows it at now. meter, when not nil,
// follows the mirror's bytes from one call to the next for a rate.
func jobView(j jobs.Job, now time.Time, csrf string, meter *rateMeter) views.Job {
	end := now
	if j.Ended() && !j.Finished.IsZero() {
		end = j.Finished
	}
	vm := views.Job{
		ID: j.ID, Model: j.Model, Repo: j.Request.Repo, Revision: j.Request.Revision, Commit: hf.Short(j.Commit),
		State: views.StateOf(j.State), Started: timeText(j.Started, now), StartedISO: j.Started.UTC().Format(time.RFC3339),
		Took: durationText(end.Sub(j.Started)), Reply: j.Reply, RetryOf: j.RetryOf, CSRF: csrf,
		CanCancel: j.State == jobs.Running, CanRetry: (j.State == jobs.Failed || j.State == jobs.Cancelled) && !j.Refused(),
		Refused: j.Refused(),
	}
	decided, rolledBack := j.RolledBack()
	if rolledBack {
		// Judged, not broken: a retry would be judged the same.
		vm.State, vm.CanRetry = views.StateOf(jobs.RolledBack), false
		vm.Of, vm.DecidedBy = j.Request.CanaryOf, decided.Detail
	}
	if j.TokensPerSecond > 0 {
		vm.TokensPerSecond = formatFloat(j.TokensPerSecond)
	}
	if st, ok := j.Step(jobs.StepSmoke); ok && st.State == jobs.Done && j.Reply == "" && !j.Request.Embeddings {
		vm.NoText = true
	}
	vm.OnDemand = onDemand(j)
	if promoted(j) {
		// Done is promoted, for an update, and served again for a
		// restore: a roll-back ends it failed.
		vm.Of, vm.Restored = j.Request.CanaryOf, j.Kind == jobs.KindRestore
	}
	if j.State == jobs.Failed {
		vm.Error = j.Error
	}
	if j.Request.CanaryOf != "" {
		vm.VersionsURL = versionsURL(j.Request.CanaryOf)
	}
	vm.FailedStep = j.EndStep()

	// Steps run one after another: each began when the one before it last
	// changed (its end), the first when the job started.
	took := map[string]time.Duration{}
	var total time.Duration
	prev := j.Started
	for _, st := range j.Steps {
		stop := st.At
		if st.State == jobs.Running {
			stop = end
		}
		d := max(stop.Sub(prev), 0)
		took[st.Name] = d
		total += d
		if st.At.After(prev) {
			prev = st.At
		}
	}
	vm.FailedStep = j.EndStep()

	names := slices.Clone(stepOrder)
	switch j.Kind {
	case jobs.KindUpdate:
		// An update's trial follows the smoke test.
		names = append(names, jobs.StepEval, jobs.StepCanary, jobs.StepVerdict)
	case jobs.KindRestore:
		names = append(names, jobs.StepRestore)
	}
	for _, st := range j.Steps {
		if !slices.Contains(names, st.Name) {
			names = append(names, st.Name)
		}
	}
	for _, name := range names {
		st, ok := j.Step(name)
		if !ok {
			word := "waiting"
			if j.Ended() {
				word = "not run"
			}
			vm.Steps = append(vm.Steps, views.Step{Name: name, State: views.StateOf(word)})
			continue
		}
		step := views.Step{Name: name, State: views.StateOf(st.State), Detail: st.Detail, Took: durationText(took[name])}
		if j.State == jobs.Cancelled && st.State == jobs.Failed && st.Detail == jobs.Cancelled {
			// Stopped by whoever cancelled the job: it did not fail.
			step.State, step.Detail = views.StateOf(jobs.Cancelled), ""
		}
		if name == jobs.StepMirror && st.State == jobs.Running && st.BytesTotal > 0 {
			step.Progress = progressView(st, meter)
		}
		vm.Steps = append(vm.Steps, step)
	}

	for _, st := range j.Steps {
		d := took[st.Name]
		share := 0.0
		if total > 0 {
			share = float64(d) * 100 / float64(total)
		}
		vm.Timeline = append(vm.Timeline, views.Segment{
			Name: st.Name, Key: views.StateOf(st.Name).Key, State: views.StateOf(st.State),
			Took: durationText(d), Share: share, ShareText: words.Percent(share / 100),
		})
	}
	return vm
}

// progressView is the mirror's download: how far, how fast, how long left.
func progressView(st jobs.Step, meter *rateMeter) *views.Progress {
	p := &views.Progress{
		Done: st.BytesDone, Total: st.BytesTotal,
		// As the step's own sentence has it.
		Text: mirror.Fetched(st.BytesDone, st.BytesTotal, st.Connections),
		Rate: "—", Left: "—",
	}
	if meter == nil {
		return p
	}
	withRate(p, meter, st.At, st.BytesDone, st.BytesTotal)
	return p
}

// withRate puts on p the rate and time left that meter works out, with the
// reading of done of total bytes at at.
func withRate(p *views.Progress, meter *rateMeter, at time.Time, done, total int64) {
	meter.add(at, done)
	if rate, ok := meter.rate(); ok {
		p.Rate = rateText(rate)
		if meter.steady() && rate > 0 {
			p.Left = durationText(time.Duration(float64(total-done) / rate * float64(time.Second)))
		}
	}
}

// rateMeter works out a download's rate from the progress a job reports:
// bytes done at a time, a few times a second. It says nothing until it has
// two readings, and the time left only once the rate has settled over a
// few; the rate is the average over the last few seconds, which a stall
// brings down as it should.
type rateMeter struct {
	samples []sample
}

type sample struct {
	at   time.Time
	done int64
}

// meterWindow is how many readings the rate is averaged over: about five
// seconds of the job's progress reports.
const meterWindow = 20

func (m *rateMeter) add(at time.Time, done int64) {
	if n := len(m.samples); n > 0 {
		last := m.samples[n-1]
		if done < last.done {
			m.samples = nil // a new download, or one started over
		} else if !at.After(last.at) {
			return // the same reading again
		}
	}
	m.samples = append(m.samples, sample{at, done})
	if len(m.samples) > meterWindow {
		m.samples = m.samples[len(m.samples)-meterWindow:]
	}
}

func (m *rateMeter) rate() (float64, bool) {
	if len(m.samples) < 2 {
		return 0, false
	}
	first, last := m.samples[0], m.samples[len(m.samples)-1]
	secs := last.at.Sub(first.at).Seconds()
	if secs <= 0 {
		return 0, false
	}
	return float64(last.done-first.done) / secs, true
}

// steady is whether the rate is worth a time left: three readings over a
// second at least.
func (m *rateMeter) steady() bool {
	n := len(m.samples)
	return n >= 3 && m.samples[n-1].at.Sub(m.samples[0].at) >= time.Second
}

// traceLink is where the operator's trace viewer shows a trace: the
// --trace-url template with {trace_id} filled in, or "" without one. A
// trace id is 32 hex digits, nothing else.
func traceLink(template, traceID string) string {
	if template == "" || len(traceID) != 32 || strings.Trim(traceID, "0123456789abcdef") != "" {
		return ""
	}
	return strings.ReplaceAll(template, "{trace_id}", traceID)
}

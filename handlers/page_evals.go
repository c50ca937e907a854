package handlers

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"modelserve/catalog"
	"modelserve/internal/evals"
	"modelserve/internal/hf"
	"modelserve/internal/words"
	"modelserve/views"
)

// evalsShown is how many of a model's newest runs its evals page sets
// side by side: enough to compare a version with the ones before it.
const evalsShown = 4

// evalsPage shows a model's eval suite in an editor and its newest runs
// side by side. Asked by htmx for a fragment (the table polling while a
// run runs), it answers the runs' table alone. ?saved= and ?ran= (a run's
// id) say what was just done, as the suite and runs now stand.
func (s *Server) evalsPage(w http.ResponseWriter, r *http.Request, v visit) {
	p, st, err := s.loadEvals(r.Context(), v, r.PathValue("name"))
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	if isFragment(r) {
		s.render(w, r, http.StatusOK, views.EvalRunsView(p.Runs))
		return
	}
	q := r.URL.Query()
	switch {
	case q.Has("saved") && len(st.Suite.Cases) == 0:
		p.Notice = "The suite is empty: " + p.Model + " has no cases to run."
	case q.Has("saved"):
		p.Notice = "The suite is saved: " + words.Count(len(st.Suite.Cases), "case", "cases") + "."
	case q.Has("ran"):
		for _, h := range p.Runs.Runs {
			if h.ID == q.Get("ran") {
				p.Notice = "Run " + h.ID + " asks " + h.Target + " the suite's cases one at a time; its column fills in as each is answered."
			}
		}
	}
	s.render(w, r, http.StatusOK, views.EvalsPageView(p))
}

// loadEvals is the evals page of the model named name, as it stands, and
// its suite.
func (s *Server) loadEvals(ctx context.Context, v visit, name string) (views.EvalsPage, evals.Stored, error) {
	m, err := s.deps.Catalog.Get(ctx, name)
	if err != nil {
		return views.EvalsPage{}, evals.Stored{}, err
	}
	st, err := s.deps.Evals.Suite(ctx, name)
	if err != nil {
		return views.EvalsPage{}, evals.Stored{}, err
	}
	// The newest runs, set oldest first: a version's column to the right
	// of the one before it.
	list, err := s.deps.Evals.Runs(ctx, name, evalsShown)
	if err != nil {
		return views.EvalsPage{}, evals.Stored{}, err
	}
	runs := make([]evals.Run, 0, len(list))
	for i := len(list) - 1; i >= 0; i-- {
		run, err := s.deps.Evals.Get(ctx, list[i].ID)
		if err != nil {
			return views.EvalsPage{}, evals.Stored{}, err
		}
		runs = append(runs, run)
	}
	now := time.Now()
	p := views.EvalsPage{
		Layout: s.layout(v, "catalog", m.Name+" · evals"), Model: m.Name, Embeddings: m.Capabilities.Embeddings,
		Form: views.EvalsForm{
			Action: evalsURL(m.Name), CSRF: v.csrf, Placeholder: exampleSuite(m), Summary: suiteSummary(st, now),
		},
		Runs: evalRunsTable(st, runs, now),
		AddCase: views.AddCaseForm{
			Action: evalsURL(m.Name) + "/cases", CSRF: v.csrf, Embeddings: m.Capabilities.Embeddings, Kind: evals.KindRegex,
		},
	}
	if m.Capabilities.Embeddings {
		p.AddCase.Kind = evals.KindSimilarity
	}
	if len(st.Suite.Cases) > 0 {
		p.Form.Suite = string(st.SuiteJSON())
		p.RunURL = evalsURL(m.Name) + "/run"
	}
	return p, st, nil
}

// evalsURL is a model's evals page.
func evalsURL(name string) string { return "/catalog/" + url.PathEscape(name) + "/evals" }

// suiteSummary says what suite is kept: "3 cases, saved by ada at
// 10:04:05 UTC".
func suiteSummary(st evals.Stored, now time.Time) string {
	if len(st.Suite.Cases) == 0 {
		return "No suite yet: write one below, or PUT it to /api/v1/catalog/" + st.Model + "/evals."
	}
	text := words.Count(len(st.Suite.Cases), "case", "cases") + ", saved"
	if st.UpdatedBy != "" {
		text += " by " + st.UpdatedBy
	}
	return text + " at " + timeText(st.UpdatedAt, now)
}

// exampleSuite is the empty editor's placeholder: a case of the kind the
// model answers.
func exampleSuite(m catalog.Model) string {
	if m.Capabilities.Embeddings {
		return `{"cases": [
  {"name": "cats", "expect": {"similarity": {"anchor": "a cat on a mat", "closer": "a kitten asleep", "farther": "a quarterly invoice"}}}
]}`
	}
	return `{"cases": [
  {"name": "capital", "prompt": "What is the capital of France? One word.", "expect": {"regex": "(?i)paris"}},
  {"name": "order", "prompt": "Give the order as JSON.", "max_tokens": 128, "expect": {"json_schema": {"type": "object", "required": ["id"]}}}
]}`
}

// evalRunsTable sets runs (oldest first) side by side: a row per case of
// the suite, in its order, then any case only older runs have.
func evalRunsTable(st evals.Stored, runs []evals.Run, now time.Time) views.EvalRuns {
	var out views.EvalRuns
	var names []string
	rows := map[string]*views.EvalCaseRow{}
	addRow := func(name, kind string, gone bool) {
		if _, ok := rows[name]; !ok {
			names = append(names, name)
			rows[name] = &views.EvalCaseRow{Name: name, Kind: kind, Gone: gone}
		}
	}
	for _, c := range st.Suite.Cases {
		addRow(c.Name, c.Kind(), false)
	}
	byRun := make([]map[string]evals.Result, len(runs))
	for i, run := range runs {
		head := views.EvalRunHead{
			ID: strconv.FormatInt(run.ID, 10), Target: run.Target, Commit: hf.Short(run.Commit), CommitFull: run.Commit,
			State: views.StateOf(run.State), Score: fmt.Sprintf("%d of %d passed", run.Passed, run.Total),
			Started: timeText(run.Started, now), StartedISO: run.Started.UTC().Format(time.RFC3339), Error: run.Error,
		}
		if run.State == evals.StateRunning {
			head.Score += " so far"
			out.Poll = evalsURL(run.Model)
		}
		out.Runs = append(out.Runs, head)
		byRun[i] = map[string]evals.Result{}
		for _, res := range run.Results {
			byRun[i][res.Case] = res
			addRow(res.Case, res.Kind, true)
		}
	}
	for _, name := range names {
		rw := rows[name]
		for i, run := range runs {
			res, ok := byRun[i][name]
			switch {
			case ok && res.Pass:
				rw.Cells = append(rw.Cells, views.EvalCell{Mark: "pass", Answer: res.Answer, Latency: latencyText(time.Duration(res.Latency) * time.Millisecond)})
			case ok:
				rw.Cells = append(rw.Cells, views.EvalCell{Mark: "fail", Reason: res.Reason, Answer: res.Answer,
					Latency: latencyText(time.Duration(res.Latency) * time.Millisecond)})
			case run.State == evals.StateRunning:
				rw.Cells = append(rw.Cells, views.EvalCell{Missing: "not asked yet"})
			default:
				rw.Cells = append(rw.Cells, views.EvalCell{Missing: "not in this run"})
			}
		}
		out.Cases = append(out.Cases, *rw)
	}
	return out
}

package handlers

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"modelserve/catalog"
	"modelserve/internal/hf"
	"modelserve/internal/words"
	"modelserve/views"
)

// versionsPage shows a model's version history: each version's commit,
// when it served, what it measured, its eval, its state and why it ended,
// and a Serve again button on each that ended.
func (s *Server) versionsPage(w http.ResponseWriter, r *http.Request, v visit) {
	name := r.PathValue("name")
	if _, err := s.deps.Catalog.Get(r.Context(), name); err != nil {
		s.pageError(w, r, v, err)
		return
	}
	history, err := s.versionHistory(r.Context(), name)
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	p := views.VersionsPage{Layout: s.layout(v, "catalog", "Versions of "+name), Model: name, CSRF: v.csrf}
	if job := s.deps.Jobs.OnTrial(name); job != "" {
		p.TrialURL = "/jobs/" + url.PathEscape(job)
	}
	now := time.Now()
	for _, f := range history {
		p.Versions = append(p.Versions, versionRow(name, f, p.TrialURL == "", now))
	}
	s.render(w, r, http.StatusOK, views.VersionsPageView(p))
}

// versionRow is one version as the history page says it; canRestore is
// whether no job tries or restores a version of the model now.
func versionRow(model string, f versionFigures, canRestore bool, now time.Time) views.VersionRow {
	state := f.State
	if state == catalog.VersionRolledBack {
		state = "rolled back"
	}
	row := views.VersionRow{
		ID: strconv.FormatInt(f.ID, 10), Commit: f.Commit, Short: hf.Short(f.Commit), Ref: f.Ref,
		State: views.StateOf(state), Served: timeText(f.Created, now), ServedISO: f.Created.UTC().Format(time.RFC3339),
		Reason: f.Reason, TokensPerSec: "not measured", Memory: "—", Eval: "not run",
	}
	if !f.Ended.IsZero() {
		row.Ended = timeText(f.Ended, now)
	}
	if f.TokensPerSecond > 0 {
		row.TokensPerSec, row.MeasuredJobURL = speedText(f.TokensPerSecond)+" measured", "/jobs/"+url.PathEscape(f.MeasuredBy)
	}
	switch {
	case f.RSSBytes > 0 && f.MemoryBytes > 0:
		row.Memory = fmt.Sprintf("%s measured, placed by %s", words.Size(f.RSSBytes), words.Size(f.MemoryBytes))
	case f.MemoryBytes > 0:
		row.Memory = "needs " + words.Size(f.MemoryBytes)
	}
	if e := f.Eval; e != nil {
		row.Eval = fmt.Sprintf("passed %d of %d", e.Passed, e.Total)
		row.EvalURL = evalsURL(model)
	}
	if f.Restore != "" && canRestore {
		row.RestoreURL = "/catalog/" + url.PathEscape(model) + "/versions/" + row.ID + "/restore"
	}
	return row
}

// versionRestore serves a version of a model again, from its history
// page, and goes on to the job doing it.
func (s *Server) versionRestore(w http.ResponseWriter, r *http.Request, v visit) {
	name := r.PathValue("name")
	j, err := s.restoreJob(r.Context(), name, r.PathValue("id"), v.user)
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	s.deps.Log.Info("a version served again from the console", "model", name, "version", r.PathValue("id"), "job", j.ID, "user", v.user)
	http.Redirect(w, r, "/jobs/"+j.ID, http.StatusSeeOther)
}

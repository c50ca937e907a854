package handlers

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"modelserve/catalog"
	"modelserve/internal/hf"
	"modelserve/internal/updates"
	"modelserve/internal/words"
	"modelserve/views"
)

// updatePage shows one update: the commit the model ran, the one its
// branch moved to, the files that changed and their sizes, and how the
// update stands against the model now.
func (s *Server) updatePage(w http.ResponseWriter, r *http.Request, v visit) {
	id, err := updateID(r.PathValue("id"))
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	u, err := s.deps.Updates.Get(r.Context(), id)
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	st, err := s.deps.Updates.Status(r.Context(), u.Model)
	gone := errors.Is(err, catalog.ErrNotFound)
	if err != nil && !gone {
		s.pageError(w, r, v, err)
		return
	}
	p := updateView(u, time.Now())
	p.Layout = s.layout(v, "catalog", "Update "+p.ID+" of "+u.Model)
	if !gone {
		p.VersionsURL = versionsURL(u.Model)
	}
	switch {
	case gone:
		p.Note = u.Model + " is no longer in the catalog."
	case st.Commit == "":
		p.ModelURL = "/catalog"
		p.Note = u.Model + " is in the catalog now without the repository it came from."
	case u.State == updates.StatePromoted:
		p.ModelURL, p.CheckURL, p.Promoted = "/catalog", checkURL(st), true
		p.Note = "Promoted: " + u.Model + " runs " + p.NewShort + " now, in place of " + p.OldShort + "."
		if st.Commit != u.NewCommit {
			p.Note = "Promoted, and " + u.Model + " has been served again since: it runs commit " + hf.Short(st.Commit) + " now."
		}
	case u.State == updates.StateRolledBack:
		p.ModelURL, p.CheckURL = "/catalog", checkURL(st)
		p.Note = "Rolled back: " + u.Model + " kept " + p.OldShort + "; the job that tried " + p.NewShort + " says why."
		if st.Commit != u.OldCommit {
			p.Note = "Rolled back; " + u.Model + " has been served again since, and runs commit " + hf.Short(st.Commit) + " now."
		}
	case st.Commit != u.OldCommit && !(u.State == updates.StateRunning && st.Commit == u.NewCommit):
		// On trial in place, the model runs the new commit while it is
		// judged: that is the trial, below, not a serve since.
		p.ModelURL, p.CheckURL = "/catalog", checkURL(st)
		p.Note = u.Model + " has been served again since, and runs commit " + hf.Short(st.Commit) + " now."
	default:
		p.ModelURL, p.CheckURL = "/catalog", checkURL(st)
		base := "/catalog/" + url.PathEscape(u.Model)
		switch job := s.deps.Jobs.OnTrial(u.Model); {
		case job != "":
			p.TrialURL, p.PromoteURL, p.RollBackURL = "/jobs/"+job, base+"/promote", base+"/rollback"
			p.TrialWhere = "beside " + u.Model
			if c, err := s.deps.Catalog.Get(r.Context(), catalog.CanaryName(u.Model, u.NewCommit)); err == nil && c.InPlace() {
				p.TrialWhere = "in place of " + u.Model + "'s replica"
			}
		case u.State == updates.StateAvailable:
			p.TryURL, p.Share = base+"/update", words.Percent(s.deps.CanaryShare)
			p.NoRoom = fmt.Sprintf("With no room beside %s, it is refused: %s's update settings say in_place: false.", u.Model, u.Model)
			if st.InPlace {
				p.NoRoom = fmt.Sprintf("With no room beside %s, it replaces %s's replica in place instead, judged by its eval suite: %s.",
					u.Model, u.Model, s.deps.Jobs.ReloadCost(r.Context(), u.Model))
			}
		}
	}
	s.render(w, r, http.StatusOK, views.UpdatePageView(p))
}

// updateView is an update as its page shows it, but for the layout and
// what depends on the model now.
func updateView(u updates.Update, now time.Time) views.UpdatePage {
	p := views.UpdatePage{
		ID: strconv.FormatInt(u.ID, 10), Model: u.Model, Repo: u.Repo, Ref: u.Ref,
		OldCommit: u.OldCommit, NewCommit: u.NewCommit, OldShort: hf.Short(u.OldCommit), NewShort: hf.Short(u.NewCommit),
		Noticed: timeText(u.NoticedAt, now), NoticedISO: u.NoticedAt.UTC().Format(time.RFC3339),
		State: views.StateOf(stateWord(u.State)),
	}
	for _, f := range u.Files {
		p.Files = append(p.Files, views.UpdateFile{Path: f.Path, OldSize: bytesText(f.OldBytes), NewSize: bytesText(f.NewBytes),
			OldSHA: f.OldSHA256, NewSHA: f.NewSHA256, Gone: f.Gone})
	}
	return p
}

// stateWord is an update's state as the page says it.
func stateWord(state string) string {
	if state == updates.StateRolledBack {
		return "rolled back"
	}
	return state
}

// bytesText is a file's size in words and, from a kilobyte, exactly: two
// files of "4.4 GB" can differ by a few bytes.
func bytesText(b int64) string {
	if b < 1000 {
		return words.Size(b)
	}
	return words.Size(b) + " (" + strconv.FormatInt(b, 10) + " bytes)"
}

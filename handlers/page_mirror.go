package handlers

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/hf"
	"modelserve/internal/mirror"
	"modelserve/internal/words"
	"modelserve/jobs"
	"modelserve/views"
)

// mirrorRemover is a mirror that can remove a file (mirror.Mirror); without
// one the page lists files and offers no removal.
type mirrorRemover interface {
	Remove(ctx context.Context, model, revision, path string, inUse func(localPath string) bool) error
}

// mirrorPage lists the files on the mirror.
func (s *Server) mirrorPage(w http.ResponseWriter, r *http.Request, v visit) {
	s.renderMirror(w, r, v, r.URL.Query().Get("removed"))
}

func (s *Server) renderMirror(w http.ResponseWriter, r *http.Request, v visit, removed string) {
	entries, err := s.deps.Mirror.List(r.Context())
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	p := views.MirrorPage{Layout: s.layout(v, "mirror", "Mirror"), Stream: "/mirror/stream"}
	p.Live = s.mirrorLive(entries, v.csrf, nil, s.waitingJobs(r.Context(), entries), s.versionsHolding(r.Context(), entries))
	gone := removed != ""
	for _, e := range entries {
		gone = gone && e.Path != removed
	}
	if gone && len(removed) <= 512 {
		p.Notice = removed + " was removed from the mirror."
	}
	s.render(w, r, http.StatusOK, views.MirrorPageView(p))
}

// mirrorLive is the mirror's files as the page shows them. meters, when
// not nil, follow each download from one call to the next for its rate;
// waiting are the jobs waiting on each file, by mirrorKey; held the
// version of its model each file's commit is (versionsHolding).
func (s *Server) mirrorLive(entries []mirror.Entry, csrf string, meters map[string]*rateMeter, waiting map[string][]string, held map[[2]string]string) views.MirrorLive {
	_, canRemove := s.deps.Mirror.(mirrorRemover)
	p := views.MirrorLive{CSRF: csrf}
	var total int64
	now := time.Now()
	for _, e := range entries {
		f := mirrorView(e, canRemove)
		f.Version = held[[2]string{e.Model, e.Revision}]
		if f.Version != "" {
			f.VersionsURL = versionsURL(e.Model)
		}
		key := mirrorKey(e)
		if f.Progress != nil && e.State == mirror.Fetching && meters != nil {
			m := meters[key]
			if m == nil {
				m = &rateMeter{}
				meters[key] = m
			}
			withRate(f.Progress, m, now, e.BytesDone, e.BytesTotal)
		}
		if e.State == mirror.Fetching || e.State == mirror.Queued {
			f.Jobs = waiting[key]
		}
		p.Files = append(p.Files, f)
		total += e.Size
	}
	if len(entries) > 0 {
		p.Total = words.Size(total) + " in " + words.Count(len(entries), "file", "files") + "."
	}
	return p
}

// mirrorKey names a file of the mirror across looks.
func mirrorKey(e mirror.Entry) string { return e.Model + "/" + e.Revision + "/" + e.Path }

// waitingJobs are the running jobs whose mirror step is fetching each
// model's files, by mirrorKey: the mirror knows how many wait on a file,
// the jobs know who. It reads the newest jobs, so it is asked when the
// files being fetched change, not at every look.
func (s *Server) waitingJobs(ctx context.Context, entries []mirror.Entry) map[string][]string {
	models := map[string][]string{} // model → keys of its files in flight
	for _, e := range entries {
		if e.State == mirror.Fetching || e.State == mirror.Queued {
			models[e.Model] = append(models[e.Model], mirrorKey(e))
		}
	}
	if len(models) == 0 {
		return nil
	}
	list, _, err := s.deps.Jobs.List(ctx, jobs.ListOptions{Limit: 200})
	if err != nil {
		if ctx.Err() == nil {
			s.deps.Log.Error("reading the jobs waiting on the mirror", "err", err)
		}
		return nil
	}
	out := map[string][]string{}
	for _, j := range list {
		st, ok := j.Step(jobs.StepMirror)
		if j.State != jobs.Running || !ok || st.State != jobs.Running {
			continue
		}
		for _, key := range models[j.Model] {
			out[key] = append(out[key], j.ID)
		}
	}
	return out
}

func mirrorView(e mirror.Entry, canRemove bool) views.MirrorFile {
	f := views.MirrorFile{
		Model: e.Model, Revision: e.Revision, Path: e.Path, Size: words.Size(e.Size),
		SHA256: e.SHA256, SHA256Short: shortSum(e.SHA256), State: views.StateOf(string(e.State)), Err: e.Err,
		// A file being fetched is the job's until it ends.
		Removable: canRemove && e.State != mirror.Fetching && e.State != mirror.Queued,
	}
	if e.State != mirror.Present && e.BytesTotal > 0 {
		f.Progress = &views.Progress{Done: e.BytesDone, Total: e.BytesTotal, Rate: "—", Left: "—",
			Text: mirror.Fetched(e.BytesDone, e.BytesTotal, e.Connections)}
	}
	return f
}

func shortSum(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}

// mirrorRemove removes one file once confirmed (as catalogRemove).
func (s *Server) mirrorRemove(w http.ResponseWriter, r *http.Request, v visit) {
	rm, ok := s.deps.Mirror.(mirrorRemover)
	if !ok {
		s.message(w, r, v, http.StatusNotImplemented, "Not done", "this mirror cannot remove files; remove them from its directory by hand")
		return
	}
	model, rev, path := r.PostFormValue("model"), r.PostFormValue("revision"), r.PostFormValue("path")
	if r.PostFormValue("confirm") != "yes" {
		s.render(w, r, http.StatusOK, views.ConfirmPage(views.Confirm{
			Layout: s.layout(v, "mirror", "Remove a file"), Heading: "Remove " + path + "?",
			Text:   "It is deleted from the mirror (" + model + " at " + rev + "). Nodes that have it keep their copy; a job fetches it again when needed.",
			Action: "/mirror", Button: "Remove the file", Cancel: "/mirror",
			Hidden: []views.Field{{Name: "model", Value: model}, {Name: "revision", Value: rev}, {Name: "path", Value: path}},
		}))
		return
	}
	// A file in use is refused with advice to stop what uses it: the
	// answer then leads to the fleet page, where that is done.
	used, inUse := false, s.servedFrom(r.Context(), model, rev)
	check := func(local string) bool {
		used = used || (inUse != nil && inUse(local))
		return used
	}
	if err := rm.Remove(r.Context(), model, rev, path, check); err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) || r.Context().Err() != nil {
			s.pageError(w, r, v, err)
			return
		}
		// The mirror writes its refusals as sentences naming the file and
		// what to do (being fetched, in use, not there).
		if used {
			s.render(w, r, http.StatusConflict, views.MessagePage(views.Message{
				Layout: s.layout(v, "mirror", "Not removed"), Heading: "Not removed", Text: err.Error(),
				Back: "/fleet", BackText: "Stop the replica, or scale its model down, on the fleet page",
			}))
			return
		}
		s.message(w, r, v, http.StatusConflict, "Not removed", err.Error())
		return
	}
	s.deps.Log.Info("file removed from the mirror", "model", model, "revision", rev, "path", path, "user", v.user)
	http.Redirect(w, r, "/mirror?removed="+url.QueryEscape(path), http.StatusSeeOther)
}

// servedFrom says whether a replica that is not stopped runs from the
// mirror's folder of model at rev: its weights, their shards and its
// projector all live there, and an engine reads them while it runs. nil
// without a fleet, which runs nothing.
func (s *Server) servedFrom(ctx context.Context, model, rev string) func(string) bool {
	if s.deps.Fleet == nil {
		return nil
	}
	folder := "/" + model + "/" + rev
	return func(string) bool {
		for _, rep := range s.deps.Fleet.Replicas() {
			if rep.State == fleet.Stopped {
				continue
			}
			m, err := s.deps.Catalog.Get(ctx, rep.Model)
			if err != nil {
				continue
			}
			if src := filepath.ToSlash(m.Source); strings.HasSuffix(src, folder) || strings.Contains(src, folder+"/") {
				return true
			}
		}
		return false
	}
}

// versionsHolding says which version of its model each (model, short
// commit) of entries is, in words ("current version", "retired version
// 3"): the mirror keeps a model's earlier versions' files until the
// operator removes them, and the page says which is which before a
// removal. What cannot be read costs the words and is logged.
func (s *Server) versionsHolding(ctx context.Context, entries []mirror.Entry) map[[2]string]string {
	out := map[[2]string]string{}
	if s.deps.Versions == nil {
		return out
	}
	read := map[string]bool{}
	for _, e := range entries {
		if read[e.Model] {
			continue
		}
		read[e.Model] = true
		vs, err := s.deps.Versions.Versions(ctx, e.Model)
		if err != nil {
			if ctx.Err() == nil {
				s.deps.Log.Error("reading a model's versions for the mirror page", "model", e.Model, "err", err)
			}
			continue
		}
		for _, v := range vs {
			state := v.State
			if state == catalog.VersionRolledBack {
				state = "rolled back"
			}
			out[[2]string{e.Model, hf.Short(v.Commit)}] = fmt.Sprintf("%s version %d", state, v.ID)
		}
	}
	return out
}

package handlers

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"

	"modelserve/internal/fleet"
	"modelserve/internal/mirror"
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
	_, canRemove := s.deps.Mirror.(mirrorRemover)
	p := views.MirrorPage{Layout: s.layout(v, "mirror", "Mirror")}
	var total int64
	gone := removed != ""
	for _, e := range entries {
		p.Files = append(p.Files, mirrorView(e, canRemove))
		total += e.Size
		gone = gone && e.Path != removed
	}
	if len(entries) > 0 {
		p.Total = sizeText(total) + " in " + itoaPlural(len(entries), "file", "files") + "."
	}
	if gone && len(removed) <= 512 {
		p.Notice = removed + " was removed from the mirror."
	}
	s.render(w, r, http.StatusOK, views.MirrorPageView(p))
}

func mirrorView(e mirror.Entry, canRemove bool) views.MirrorFile {
	f := views.MirrorFile{
		Model: e.Model, Revision: e.Revision, Path: e.Path, Size: sizeText(e.Size),
		SHA256: e.SHA256, SHA256Short: shortSum(e.SHA256), State: views.StateOf(string(e.State)), Err: e.Err,
		// A file being fetched is the job's until it ends.
		Removable: canRemove && e.State != mirror.Fetching && e.State != mirror.Queued,
	}
	if e.State != mirror.Present && e.BytesTotal > 0 {
		f.Progress = &views.Progress{Done: e.BytesDone, Total: e.BytesTotal,
			Text: sizeOfText(e.BytesDone, e.BytesTotal) + " (" + percentText(float64(e.BytesDone)*100/float64(e.BytesTotal)) + ")"}
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
	if err := rm.Remove(r.Context(), model, rev, path, s.servedFrom(r.Context(), model, rev)); err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) || r.Context().Err() != nil {
			s.pageError(w, r, v, err)
			return
		}
		// The mirror writes its refusals as sentences naming the file and
		// what to do (being fetched, in use, not there).
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

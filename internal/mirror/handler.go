package mirror

import (
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Handler serves present files to nodes at /mirror/<model>/<revision>/<path>,
// with Range requests (a node resumes too) and conditional requests: the
// ETag is the file's sha256, so a node that has the file already is
// answered 304. Partial files and the mirror's sidecars are never served,
// and nothing outside the mirror's directory is, even through a symbolic
// link: files are opened through an os.Root.
func (m *Mirror) Handler() http.Handler {
	return http.HandlerFunc(m.serveFile)
}

func (m *Mirror) serveFile(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the mirror serves files with GET and HEAD", http.StatusMethodNotAllowed)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/mirror/")
	parts := strings.SplitN(rest, "/", 3)
	if !ok || len(parts) != 3 {
		http.Error(w, "not a file on the mirror; files are at /mirror/<model>/<revision>/<path>", http.StatusNotFound)
		return
	}
	model, rev, p := parts[0], parts[1], parts[2]
	if reserved(path.Base(p)) {
		http.NotFound(w, r)
		return
	}
	// The same checks as for a fetch: "..", empty segments, backslashes
	// and control characters never reach the filesystem.
	if err := checkNames(model, rev, p); err != nil {
		http.Error(w, "not a path on the mirror", http.StatusBadRequest)
		return
	}
	root, err := os.OpenRoot(m.dir)
	if err != nil {
		m.log.Error("mirror directory unreadable", "dir", m.dir, "err", err)
		http.Error(w, "the mirror cannot read its directory", http.StatusInternalServerError)
		return
	}
	defer root.Close()
	rel := filepath.Join(model, rev, filepath.FromSlash(p))
	f, err := root.Open(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			http.NotFound(w, r)
			return
		}
		// Escapes through a symbolic link land here too.
		http.Error(w, "not a file on the mirror", http.StatusNotFound)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		http.NotFound(w, r)
		return
	}
	if sum, err := readSidecar(filepath.Join(m.dir, rel)); err == nil {
		w.Header().Set("ETag", `"`+sum+`"`)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, path.Base(p), st.ModTime(), f)
}

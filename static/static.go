// Package static holds the console's stylesheets and scripts, embedded in
// the binary, and serves them with names that change with their content.
//
// A browser that cached yesterday's htmx or stylesheet for a year would show
// today's pages with it. Each file is served under a name carrying a hash of
// its bytes ("app.3f2a1b9c.css"), so its URL changes whenever it does and the
// old one can be cached forever; pages ask Path for the current name. The
// vendored files (vendor/, see README) are pinned and never edited here.
package static

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed app.css app.js vendor
var files embed.FS

// asset is one file, read once at start.
type asset struct {
	name string // as embedded: "app.css", "vendor/htmx-2.0.11.min.js"
	body []byte
	hash string // the first 10 hex digits of its sha256
}

var (
	byName   = map[string]*asset{} // "app.css" → asset
	byHashed = map[string]*asset{} // "app.3f2a1b9c01.css" → asset
)

func init() {
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		a := &asset{name: p, body: b, hash: hex.EncodeToString(sum[:])[:10]}
		byName[p] = a
		byHashed[hashed(p, a.hash)] = a
		return nil
	})
	if err != nil {
		// The files are in the binary: reading them cannot fail.
		panic("static: " + err.Error())
	}
}

// hashed puts the hash before the extension: "vendor/x.min.js" becomes
// "vendor/x.min.<hash>.js".
func hashed(name, hash string) string {
	ext := path.Ext(name)
	return strings.TrimSuffix(name, ext) + "." + hash + ext
}

// Path is the URL a page links name by ("app.css" gives
// "/static/app.<hash>.css"). A name that is not embedded panics: it is a
// mistake in a template, found by the first test that renders it.
func Path(name string) string {
	a, ok := byName[name]
	if !ok {
		panic("static: no file " + name)
	}
	return "/static/" + hashed(a.name, a.hash)
}

// Handler serves /static/<name>. A hashed name is cached for a year and
// never revalidated; the plain name (for whoever types it) is revalidated
// every time by its ETag.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/static/")
		a, immutable := byHashed[name]
		if !immutable {
			if a = byName[name]; a == nil {
				http.NotFound(w, r)
				return
			}
		}
		h := w.Header()
		h.Set("ETag", `"`+a.hash+`"`)
		h.Set("X-Content-Type-Options", "nosniff")
		if immutable {
			h.Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			h.Set("Cache-Control", "no-cache")
		}
		// ServeContent sets the type from the extension, answers
		// If-None-Match with 304, and serves ranges.
		http.ServeContent(w, r, path.Base(a.name), time.Time{}, bytes.NewReader(a.body))
	})
}

package handlers

import (
	"bytes"
	"context"
	"modelserve/internal/operr"
	"net/http"
	"strings"

	"github.com/a-h/templ"

	"modelserve/internal/store"
	"modelserve/static"
	"modelserve/views"
)

// assets are the cache-busted URLs every page links.
var assets = views.Assets{
	Pico: static.Path("vendor/pico-2.1.1.min.css"),
	CSS:  static.Path("app.css"),
	HTMX: static.Path("vendor/htmx-2.0.11.min.js"),
	SSE:  static.Path("vendor/htmx-ext-sse-2.2.4.min.js"),
	App:  static.Path("app.js"),
}

// genericError is what a page says of an error that is not the operator's
// to act on; the log has the cause.
const genericError = "modelserve could not do that; the server's log says why"

func (s *Server) layout(v visit, page, title string) views.Layout {
	return views.Layout{Title: title, Page: page, User: v.user, CSRF: v.csrf, Assets: assets}
}

// render writes c with status once it has rendered whole, so that a failure
// half way is an error page and not half a page.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, c templ.Component) {
	var buf bytes.Buffer
	if err := c.Render(r.Context(), &buf); err != nil {
		if r.Context().Err() == nil {
			s.deps.Log.Error("rendering a console page", "path", r.URL.Path, "err", err)
		}
		http.Error(w, genericError, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// renderString renders c to a string, for an event's data.
func renderString(ctx context.Context, c templ.Component) ([]byte, error) {
	var buf bytes.Buffer
	if err := c.Render(ctx, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// message answers with one sentence: a page, or for an htmx fragment the
// sentence alone, to be shown where the fragment would have been.
func (s *Server) message(w http.ResponseWriter, r *http.Request, v visit, status int, heading, text string) {
	if isFragment(r) {
		s.render(w, r, status, views.Alert(text))
		return
	}
	back, backText := backFrom(r.URL.Path)
	s.render(w, r, status, views.MessagePage(views.Message{
		Layout: s.layout(v, "", heading), Heading: heading, Text: text, Back: back, BackText: backText,
	}))
}

// backFrom is the page a message leads back to: the one the request was
// about (a refusal on the mirror page leads back to the mirror, not to the
// jobs).
func backFrom(path string) (href, text string) {
	first, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	switch first {
	case "mirror":
		return "/mirror", "Back to the mirror"
	case "fleet":
		return "/fleet", "Back to the fleet"
	case "catalog", "updates":
		return "/catalog", "Back to the catalog"
	case "serve":
		return "/serve", "Back to the serve form"
	}
	return "/jobs", "Back to the jobs"
}

// pageError shows err: as it is when it is a sentence for the operator,
// else logged once with its cause and shown as a generic sentence.
func (s *Server) pageError(w http.ResponseWriter, r *http.Request, v visit, err error) {
	if r.Context().Err() != nil {
		return // the browser went away; nobody reads the answer
	}
	err = store.FullError(err, "that could not be done")
	if status, ok := operatorStatus(err); ok {
		msg, _ := operr.Sentence(err)
		s.message(w, r, v, status, "Not done", msg)
		return
	}
	s.deps.Log.Error("console request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	s.message(w, r, v, http.StatusInternalServerError, "Something went wrong", genericError)
}

package handlers

import (
	"crypto/subtle"
	"net/http"
)

// Every request that changes something must carry the session's CSRF
// token: forms in a hidden field named csrf, htmx requests in the
// X-CSRF-Token header (hx-headers on <body>). Another site can make a
// browser post to the console with its cookie (SameSite=Lax stops most,
// not all: an older browser, a subdomain), but it cannot read the token.
const (
	csrfField  = "csrf"
	csrfHeader = "X-CSRF-Token"
	// maxFormBytes bounds a form: the console's largest, the serve form,
	// is a few kilobytes.
	maxFormBytes = 1 << 20
)

// csrfOK is whether the request carries the session's token, in its form
// or its header. Either will do: a page whose <body> still holds an older
// token after a boosted swap sends it in the header, and its form's field
// is the current one.
func (s *Server) csrfOK(w http.ResponseWriter, r *http.Request, v visit) bool {
	if v.csrf == "" {
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	for _, got := range []string{r.PostFormValue(csrfField), r.Header.Get(csrfHeader)} {
		if got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(v.csrf)) == 1 {
			return true
		}
	}
	return false
}

// csrfRefused answers 403 with a sentence saying what to do.
func (s *Server) csrfRefused(w http.ResponseWriter, r *http.Request, v visit) {
	const msg = "this form has expired or did not come from this console: reload the page and try again"
	s.deps.Log.Warn("console request without a valid CSRF token", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
	s.message(w, r, v, http.StatusForbidden, "Refused", msg)
}

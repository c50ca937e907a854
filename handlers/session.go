package handlers

import (
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/sessions"
)

// The console's session is one cookie, signed and encrypted with keys kept
// in the database (auth.SessionKeys): who is signed in and the session's
// CSRF token. Nothing about a session is kept on the server, so a restart
// signs nobody out.
const (
	sessionCookie = "modelserve_session"
	// sessionMaxAge is how long a sign-in lasts, from signing in: a week
	// of an operator's working days, after which they sign in again.
	sessionMaxAge = 7 * 24 * time.Hour
)

// The session's values.
const (
	keyUser = "user"
	keyCSRF = "csrf"
	keyAt   = "at" // when the user signed in, Unix seconds
)

// visit is who is at the console, as their session says.
type visit struct {
	// user is the name signed in, "" for nobody.
	user string
	// csrf is the session's token, which every form and htmx request must
	// send back.
	csrf string
}

// page is a console handler: a request, and who made it.
type page func(w http.ResponseWriter, r *http.Request, v visit)

func newSessionStore(hashKey, blockKey []byte) *sessions.CookieStore {
	st := sessions.NewCookieStore(hashKey, blockKey)
	st.MaxAge(int(sessionMaxAge / time.Second))
	return st
}

// session reads the visitor's session. A cookie that does not decode (keys
// changed, tampered with, expired) is a new session: the visitor signs in
// again.
func (s *Server) session(r *http.Request) *sessions.Session {
	sess, err := s.sessions.New(r, sessionCookie)
	if err != nil {
		sess, _ = s.sessions.New(&http.Request{Header: http.Header{}}, sessionCookie)
	}
	return sess
}

// saveSession writes the session's cookie: HttpOnly, so no script reads it;
// SameSite=Lax, so another site's forms do not carry it; Secure when the
// console is reached over TLS (or Deps.Secure says a proxy ends TLS).
func (s *Server) saveSession(w http.ResponseWriter, r *http.Request, sess *sessions.Session, maxAge int) error {
	sess.Options = &sessions.Options{
		Path:     "/",
		MaxAge:   maxAge,
		HttpOnly: true,
		SameSite: http.SameSiteLaxMode,
		Secure:   r.TLS != nil || s.deps.Secure,
	}
	return sess.Save(r, w)
}

// visitOf reads who is visiting, giving the session a CSRF token (and the
// visitor its cookie) on the first visit.
func (s *Server) visitOf(w http.ResponseWriter, r *http.Request) (visit, error) {
	sess := s.session(r)
	v := visit{}
	v.user, _ = sess.Values[keyUser].(string)
	v.csrf, _ = sess.Values[keyCSRF].(string)
	if at, _ := sess.Values[keyAt].(int64); v.user != "" && time.Since(time.Unix(at, 0)) > sessionMaxAge {
		v.user = ""
	}
	if v.csrf == "" {
		v.csrf = newToken()
		sess.Values = map[any]any{keyCSRF: v.csrf}
		if err := s.saveSession(w, r, sess, int(sessionMaxAge/time.Second)); err != nil {
			return visit{}, err
		}
		v.user = ""
	}
	return v, nil
}

// signIn starts a session for user with a fresh CSRF token: whatever token
// the visitor had before is no longer good.
func (s *Server) signIn(w http.ResponseWriter, r *http.Request, user string) error {
	sess := s.session(r)
	sess.Values = map[any]any{keyUser: user, keyCSRF: newToken(), keyAt: time.Now().Unix()}
	return s.saveSession(w, r, sess, int(sessionMaxAge/time.Second))
}

// signOut deletes the session's cookie.
func (s *Server) signOut(w http.ResponseWriter, r *http.Request) error {
	sess := s.session(r)
	sess.Values = map[any]any{}
	return s.saveSession(w, r, sess, -1)
}

func newToken() string {
	var b [32]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// anyone serves h to signed-in visitors and others alike (the sign-in
// page), with the session read and CSRF checked.
func (s *Server) anyone(h page) http.Handler {
	return s.console(h, false)
}

// signedIn serves h to a signed-in user; anyone else is sent to sign in,
// and brought back afterwards.
func (s *Server) signedIn(h page) http.Handler {
	return s.console(h, true)
}

func (s *Server) console(h page, needUser bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w.Header())
		v, err := s.visitOf(w, r)
		if err != nil {
			s.pageError(w, r, visit{}, err)
			return
		}
		if needUser && v.user != "" {
			// A session outlives nothing it should not: a user removed
			// since is signed out.
			ok, err := s.users.Exists(r.Context(), v.user)
			if err != nil {
				s.pageError(w, r, v, err)
				return
			}
			if !ok {
				v.user = ""
			}
		}
		if needUser && v.user == "" {
			s.toSignIn(w, r)
			return
		}
		if !safeMethod(r.Method) && !s.csrfOK(w, r, v) {
			s.csrfRefused(w, r, v)
			return
		}
		h(w, r, v)
	})
}

// toSignIn sends a visitor who is not signed in to the sign-in page, with
// where they were going. An htmx request is told to load the page whole.
func (s *Server) toSignIn(w http.ResponseWriter, r *http.Request) {
	next := ""
	if safeMethod(r.Method) {
		next = r.URL.RequestURI()
	}
	if isFragment(r) {
		// Back to the page the fragment was for, not the fragment.
		next = ""
		if u, err := url.Parse(r.Header.Get("HX-Current-URL")); err == nil {
			next = u.RequestURI()
		}
	}
	target := "/login"
	if next = localPath(next); next != "/" {
		target += "?next=" + url.QueryEscape(next)
	}
	if isFragment(r) {
		w.Header().Set("HX-Redirect", target)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// localPath is next when it is a path on this server, and "/" otherwise:
// after signing in, nobody is sent off to another site ("//evil.example",
// "https://evil.example", "/\evil.example", which browsers read as another
// host).
func localPath(next string) string {
	if next == "" || next[0] != '/' || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n\t") {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(u.Path, "/") {
		return "/"
	}
	return next
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// isFragment is whether htmx asked for a piece of a page, to swap into the
// page it has, rather than a page (a boosted link or form).
func isFragment(r *http.Request) bool {
	return r.Header.Get("HX-Request") == "true" && r.Header.Get("HX-Boosted") != "true"
}

// csp keeps any script but the console's own from running, even should a
// registry's text slip through escaping: scripts and styles come from
// /static only. Inline style attributes are allowed for the widths of the
// bars, which are numbers the handlers work out.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; " +
	"img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"

func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

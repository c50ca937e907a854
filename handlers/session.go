package handlers

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/sessions"

	"modelserve/internal/accesslog"
	"modelserve/internal/auth"
	"modelserve/internal/redact"
)

// A console session is a row on the server (auth.Sessions) and a cookie
// that names it: the cookie carries the session's random secret and its
// CSRF token, signed and encrypted with the keys of Deps.SessionKeys (a
// key file beside the database, or a secret given at start; never the
// database). Signing out deletes the row, so a copy of the cookie taken
// before is dead too; a password change or the user's removal deletes all
// of theirs. A restart signs nobody out.
//
// A visitor who has not signed in has a cookie too, holding only the CSRF
// token the sign-in form needs; no row is made for them, so a crawler
// fills no table.
const (
	sessionCookie = "modelserve_session"
	// sessionMaxAge is how long a sign-in lasts, from signing in: a week
	// of an operator's working days, after which they sign in again.
	sessionMaxAge = 7 * 24 * time.Hour
)

// The cookie's values.
const (
	keyCSRF   = "csrf"
	keySecret = "session" // the session's secret (auth.Sessions.Start)
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

func newSessionStore(k auth.SessionKeys) *sessions.CookieStore {
	st := sessions.NewCookieStore(k.Hash, k.Block)
	st.MaxAge(int(sessionMaxAge / time.Second))
	return st
}

// session reads the visitor's cookie. A cookie that does not decode (keys
// changed, tampered with, expired) is a new one: the visitor signs in
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
// console is reached over TLS, directly or through a trusted proxy that
// says so, or when Deps.Secure says the console's address is https.
func (s *Server) saveSession(w http.ResponseWriter, r *http.Request, sess *sessions.Session, maxAge int) error {
	sess.Options = &sessions.Options{
		Path:     "/",
		MaxAge:   maxAge,
		HttpOnly: true,
		SameSite: http.SameSiteLaxMode,
		Secure:   r.TLS != nil || s.deps.Secure || viaHTTPS(r),
	}
	return sess.Save(r, w)
}

// visitOf reads who is visiting, giving the visitor a CSRF token (and its
// cookie) on the first visit. A cookie whose session has ended (signed
// out, revoked, expired, its user removed) is nobody's: the secret is
// dropped from it and the visitor signs in again.
func (s *Server) visitOf(w http.ResponseWriter, r *http.Request) (visit, error) {
	sess := s.session(r)
	v := visit{}
	v.csrf, _ = sess.Values[keyCSRF].(string)
	secret, _ := sess.Values[keySecret].(string)
	if secret != "" {
		row, err := s.live.Find(r.Context(), secret)
		switch {
		case err == nil:
			v.user = row.User
		case errors.Is(err, auth.ErrNoSession):
			delete(sess.Values, keySecret)
			if v.csrf != "" {
				if err := s.saveSession(w, r, sess, int(sessionMaxAge/time.Second)); err != nil {
					return visit{}, err
				}
			}
		default:
			return visit{}, err
		}
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
// the visitor had before is no longer good, and a session the cookie named
// before (signing in again, or as someone else) is ended.
func (s *Server) signIn(w http.ResponseWriter, r *http.Request, user string) error {
	sess := s.session(r)
	if old, _ := sess.Values[keySecret].(string); old != "" {
		if err := s.live.End(r.Context(), old); err != nil {
			return err
		}
	}
	client := auth.Client{UserAgent: r.UserAgent()}
	if a := clientAddr(r); a.IsValid() {
		client.Address = a.String()
	}
	secret, _, err := s.live.Start(r.Context(), user, sessionMaxAge, client)
	if err != nil {
		return err
	}
	sess.Values = map[any]any{keyCSRF: newToken(), keySecret: secret}
	return s.saveSession(w, r, sess, int(sessionMaxAge/time.Second))
}

// signOut ends the session on the server, which is what makes a copy of
// the cookie useless, then deletes the cookie.
func (s *Server) signOut(w http.ResponseWriter, r *http.Request) error {
	sess := s.session(r)
	if secret, _ := sess.Values[keySecret].(string); secret != "" {
		if err := s.live.End(r.Context(), secret); err != nil {
			return err
		}
	}
	sess.Values = map[any]any{}
	return s.saveSession(w, r, sess, -1)
}

// newKeysIfNone is k, or random keys for this process alone when k is
// empty (tests): cookies then do not outlive the process.
func newKeysIfNone(k auth.SessionKeys) auth.SessionKeys {
	if len(k.Hash) == 0 || len(k.Block) == 0 {
		return auth.NewSessionKeys()
	}
	return k
}

// requestKey is the type of this package's request context keys.
type requestKey int

const httpsKey requestKey = iota

// viaHTTPS is whether a trusted proxy said the client reached it over
// HTTPS (fromProxy).
func viaHTTPS(r *http.Request) bool {
	v, _ := r.Context().Value(httpsKey).(bool)
	return v
}

func withHTTPS(ctx context.Context) context.Context { return context.WithValue(ctx, httpsKey, true) }

func newToken() string {
	var b [32]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// room registers console handlers on mux, each behind the session read
// and the CSRF check (console): for a signed-in user when needUser, anyone
// else being sent to sign in and brought back afterwards; for anyone
// otherwise (the sign-in page).
func (s *Server) room(mux *http.ServeMux, needUser bool) func(pattern string, h page) {
	return func(pattern string, h page) { mux.Handle(pattern, s.console(h, needUser)) }
}

func (s *Server) console(h page, needUser bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w.Header())
		v, err := s.visitOf(w, r)
		if err != nil {
			s.pageError(w, r, visit{}, err)
			return
		}
		accesslog.SetUser(r.Context(), v.user)
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
// host), nor to a URL longer than any page of the console (maxURL). What
// looks like a credential in its query is taken out (redact.Query): a
// token put in a URL by mistake went on through the sign-in page into
// the log lines of both redirects.
func localPath(next string) string {
	if next == "" || len(next) > maxURL || next[0] != '/' || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n\t") {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(u.Path, "/") {
		return "/"
	}
	if u.RawQuery == "" {
		return next
	}
	q, ok := redact.Query(u.RawQuery)
	if !ok {
		return u.EscapedPath()
	}
	return u.EscapedPath() + "?" + q
}

// maxURL is the longest URL the console sends a visitor to: far longer
// than any of its pages' (the serve form's is the longest), far shorter
// than a megabyte of query, which was a megabyte of Location header.
const maxURL = 2 << 10

// withQuery is path with a request's query, for a redirect to the page
// that shows it; without it when it is longer than any such page's.
func withQuery(path, rawQuery string) string {
	if rawQuery == "" || len(path)+1+len(rawQuery) > maxURL {
		return path
	}
	return path + "?" + rawQuery
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

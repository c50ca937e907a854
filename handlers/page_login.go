package handlers

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"modelserve/internal/auth"
	"modelserve/internal/operr"
	"modelserve/internal/store"
	"modelserve/internal/words"
	"modelserve/views"
)

// loginPage shows the sign-in form; someone signed in already goes on.
func (s *Server) loginPage(w http.ResponseWriter, r *http.Request, v visit) {
	next := localPath(r.URL.Query().Get("next"))
	if v.user != "" {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	s.renderLogin(w, r, v, http.StatusOK, "", next, "")
}

func (s *Server) renderLogin(w http.ResponseWriter, r *http.Request, v visit, status int, name, next, msg string) {
	if next == "/" {
		next = ""
	}
	// A user's name is at most 64 characters (auth): a longer one is
	// shown clipped, not a megabyte of page to anyone who asks.
	s.render(w, r, status, views.LoginPage(views.Login{
		Layout: s.layout(visit{csrf: v.csrf}, "login", "Sign in"), Name: words.Clip(name), Next: next, Error: msg,
	}))
}

// loginSubmit checks the name and password, refusing while the name from
// this address, or the address, has failed too often (session_throttle.go),
// and goes on to where the user was going.
func (s *Server) loginSubmit(w http.ResponseWriter, r *http.Request, v visit) {
	name, password := r.PostFormValue("name"), r.PostFormValue("password")
	next := localPath(r.PostFormValue("next"))
	keys := signInKeys(name, clientAddr(r))
	if wait := s.throttle.wait(keys); wait > 0 {
		s.deps.Log.Warn("sign-in refused: too many failures", "user", words.Clip(name), "remote", r.RemoteAddr)
		w.Header().Set("Retry-After", fmt.Sprint(int(math.Ceil(wait.Seconds()))))
		s.renderLogin(w, r, v, http.StatusTooManyRequests, name, next, tooMany(wait))
		return
	}
	user, err := s.users.Authenticate(r.Context(), name, password)
	if errors.Is(err, auth.ErrBadPassword) {
		s.throttle.fail(keys)
		s.deps.Log.Warn("sign-in failed", "user", words.Clip(name), "remote", r.RemoteAddr)
		s.renderLogin(w, r, v, http.StatusUnauthorized, name, next, err.Error()+": check both and try again")
		return
	}
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	// Only the name's count from here: an address that guessed other
	// names keeps its count, however many accounts of its own it has.
	s.throttle.reset(keys[:1])
	if err := s.signIn(w, r, user); err != nil {
		// A session is a row: on a full disk, said on the sign-in form.
		err = store.FullError(err, "you could not be signed in")
		if status, ok := operatorStatus(err); ok {
			msg, _ := operr.Sentence(err)
			s.renderLogin(w, r, v, status, name, next, msg)
			return
		}
		s.pageError(w, r, v, err)
		return
	}
	s.deps.Log.Info("signed in", "user", user, "remote", r.RemoteAddr)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// tooMany says how long to wait: seconds under a minute, else whole
// minutes, rounded up.
func tooMany(wait time.Duration) string {
	n, one, many := int(math.Ceil(wait.Seconds())), "second", "seconds"
	if n > 60 {
		n, one, many = int(math.Ceil(wait.Minutes())), "minute", "minutes"
	}
	return fmt.Sprintf("too many attempts; wait %s and try again", words.Count(n, one, many))
}

// logout ends the session and shows the sign-in page.
func (s *Server) logout(w http.ResponseWriter, r *http.Request, v visit) {
	if err := s.signOut(w, r); err != nil {
		s.pageError(w, r, v, err)
		return
	}
	s.deps.Log.Info("signed out", "user", v.user)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

package handlers

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"modelserve/internal/auth"
	"modelserve/internal/words"
	"modelserve/views"
)

// The tokens page makes, lists and revokes API tokens from the console, so
// that a token is made in the database the server reads: made with the
// command line from another folder, it was made in another database, and
// the server answered it 401.

// maxTokenModels bounds the models one token may be limited to from the
// form.
const maxTokenModels = 100

// tokensPage lists the tokens and offers the form.
func (s *Server) tokensPage(w http.ResponseWriter, r *http.Request, v visit) {
	p := views.TokensPage{Form: views.TokenForm{Scope: auth.ScopeAll}}
	if name := r.URL.Query().Get("revoked"); name != "" && len(name) <= 64 {
		p.Notice = "The token " + name + " was revoked: it is refused from now on."
	}
	s.renderTokens(w, r, v, http.StatusOK, p)
}

// tokensSubmit makes a token from the form and shows it, this once.
func (s *Server) tokensSubmit(w http.ResponseWriter, r *http.Request, v visit) {
	f := views.TokenForm{
		Name:   strings.TrimSpace(r.PostFormValue("name")),
		Scope:  r.PostFormValue("scope"),
		Models: strings.TrimSpace(r.PostFormValue("models")),
	}
	lim := auth.Limits{Scope: f.Scope}
	for _, m := range strings.Split(f.Models, ",") {
		if m = strings.TrimSpace(m); m != "" {
			lim.Models = append(lim.Models, m)
		}
	}
	if len(lim.Models) > 0 && f.Scope == auth.ScopeAll {
		// The form's default is all; naming models is asking for the
		// gateway, as token create --models is.
		lim.Scope = ""
	}
	var err error
	tok := ""
	if len(lim.Models) > maxTokenModels {
		err = errors.New("a token may be limited to at most 100 models")
	} else {
		tok, err = s.tokens.CreateLimited(r.Context(), f.Name, lim)
	}
	if err != nil {
		if !tokenRefusal(err) {
			s.pageError(w, r, v, err)
			return
		}
		// A token's name is at most 64 characters: a longer one is shown
		// clipped, as the sentence above it quotes it.
		f.Error, f.Name = err.Error(), words.Clip(f.Name)
		s.renderTokens(w, r, v, http.StatusBadRequest, views.TokensPage{Form: f})
		return
	}
	s.deps.Log.Info("API token made from the console", "token", f.Name, "user", v.user)
	// The answer holds the token: no cache keeps it.
	w.Header().Set("Cache-Control", "no-store")
	s.renderTokens(w, r, v, http.StatusOK, views.TokensPage{Form: views.TokenForm{Scope: auth.ScopeAll}, New: tok, NewName: f.Name,
		URL: s.publicBase(r)})
}

// tokenRefusal is whether err is auth's sentence about the form (a bad
// name, scope or model, a name taken), which the form shows; anything
// else wraps a cause, and is logged.
func tokenRefusal(err error) bool {
	return errors.Is(err, auth.ErrExists) || errors.Unwrap(err) == nil
}

// tokensRevoke revokes a token once confirmed, then shows the list
// without it: with JavaScript, hx-confirm has asked and the form says
// confirm=yes; without, this asks on a page of its own first.
func (s *Server) tokensRevoke(w http.ResponseWriter, r *http.Request, v visit) {
	name := r.PathValue("name")
	if r.PostFormValue("confirm") != "yes" {
		s.render(w, r, http.StatusOK, views.ConfirmPage(views.Confirm{
			Layout: s.layout(v, "tokens", "Revoke "+name), Heading: "Revoke " + name + "?",
			Text:   "Whatever uses it is refused from then on; a revoked token cannot be brought back, only a new one made.",
			Action: "/tokens/" + url.PathEscape(name) + "/revoke", Button: "Revoke " + name, Cancel: "/tokens",
		}))
		return
	}
	if err := s.tokens.Revoke(r.Context(), name); err != nil {
		if errors.Is(err, auth.ErrNotFound) {
			s.message(w, r, v, http.StatusNotFound, "Not done", err.Error())
			return
		}
		s.pageError(w, r, v, err)
		return
	}
	s.deps.Log.Info("API token revoked from the console", "token", name, "user", v.user)
	http.Redirect(w, r, "/tokens?revoked="+url.QueryEscape(name), http.StatusSeeOther)
}

func (s *Server) renderTokens(w http.ResponseWriter, r *http.Request, v visit, status int, p views.TokensPage) {
	list, err := s.tokens.List(r.Context())
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	p.Layout = s.layout(v, "tokens", "API tokens")
	p.Command = s.tokenCreate("NAME", "[--scope gateway]", "[--models a,b]")
	now := time.Now()
	for _, t := range list {
		row := views.TokenRow{Name: t.Name, Scope: t.Scope, Models: or(strings.Join(t.Models, ", "), "all"),
			Created: timeText(t.Created, now), LastUsed: "never"}
		if !t.LastUsed.IsZero() {
			row.LastUsed = timeText(t.LastUsed, now)
		}
		p.Tokens = append(p.Tokens, row)
	}
	s.render(w, r, status, views.TokensPageView(p))
}

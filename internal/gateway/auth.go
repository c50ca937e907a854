package gateway

import (
	"crypto/sha256"
	"errors"
	"net/http"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"modelserve/internal/accesslog"
	"modelserve/internal/auth"
)

// authenticate is the token the request carries, as the OpenAI clients
// send their apiKey: Authorization: Bearer <token>.
func (g *Gateway) authenticate(r *http.Request) (auth.Token, *apiError) {
	tok, ok := auth.BearerToken(r.Header.Get("Authorization"))
	if !ok {
		return auth.Token{}, unauthorized("the gateway needs a modelserve API token: send Authorization: Bearer <token> " +
			"(the OpenAI clients' api key), made with modelserve token create NAME")
	}
	who, err := g.tokens.check(r, g.opts.Tokens, tok)
	if errors.Is(err, auth.ErrBadToken) {
		return auth.Token{}, unauthorized(err.Error() + ": make a new one with modelserve token create NAME")
	}
	if err != nil {
		g.log.Error("checking an API token", "err", err)
		return auth.Token{}, internal()
	}
	accesslog.SetToken(r.Context(), who.Name)
	return who, nil
}

// mayUse refuses a token limited to other models as if the model did not
// exist: a 403 would tell the token which other models there are.
func mayUse(who auth.Token, asked, name string) *apiError {
	if who.MayUse(name, asked) {
		return nil
	}
	return modelNotFound(asked)
}

// tokens keeps the tokens checked lately, for Options.TokenEvery: a
// client's requests then cost the token store one read in that while
// rather than one each, which was the largest part of the gateway's own
// work on a request. A token revoked in this process is refused at once
// (ForgetTokens); one revoked by another process sharing the database,
// once its while is over. Only tokens that passed are kept, by their hash,
// and no more than maxKeptTokens of them.
type tokens struct {
	every time.Duration
	clock clock.Clock // the gateway's: when a kept token is to be read again
	mu    sync.Mutex
	kept  map[[sha256.Size]byte]keptToken
	// forgot counts ForgetTokens: a check that began before one does not
	// keep what it read, which may be the token just revoked.
	forgot uint64
}

// ForgetTokens lets go of every token kept: the next request with each is
// checked against the token store. Called when a token is revoked.
func (g *Gateway) ForgetTokens() {
	g.tokens.mu.Lock()
	defer g.tokens.mu.Unlock()
	clear(g.tokens.kept)
	g.tokens.forgot++
}

type keptToken struct {
	who   auth.Token
	until time.Time
}

const maxKeptTokens = 4096

func (ts *tokens) check(r *http.Request, store Tokens, tok string) (auth.Token, error) {
	key := sha256.Sum256([]byte(tok))
	now := ts.clock.Now()
	ts.mu.Lock()
	k, ok := ts.kept[key]
	forgot := ts.forgot
	ts.mu.Unlock()
	if ok && now.Before(k.until) {
		return k.who, nil
	}
	who, err := store.Check(r.Context(), tok)
	if err != nil {
		return who, err
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.forgot != forgot {
		return who, nil
	}
	if ts.kept == nil {
		ts.kept = map[[sha256.Size]byte]keptToken{}
	}
	if len(ts.kept) >= maxKeptTokens {
		for k, v := range ts.kept {
			if !now.Before(v.until) {
				delete(ts.kept, k)
			}
		}
		if len(ts.kept) >= maxKeptTokens {
			clear(ts.kept)
		}
	}
	ts.kept[key] = keptToken{who: who, until: now.Add(ts.every)}
	return who, nil
}

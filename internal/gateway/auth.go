package gateway

import (
	"errors"
	"net/http"

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
	who, err := g.opts.Tokens.Check(r.Context(), tok)
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

package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"modelserve/internal/auth"
)

// heldTokens is countingTokens whose first check, having read the token
// as good, waits for release before it answers: a revoke that lands
// while a request's check is under way.
type heldTokens struct {
	countingTokens
	read, release chan struct{}
}

func (h *heldTokens) Check(ctx context.Context, tok string) (auth.Token, error) {
	who, err := h.countingTokens.Check(ctx, tok)
	if h.read != nil {
		read := h.read
		h.read = nil
		close(read)
		<-h.release
	}
	return who, err
}

// TestATokenRevokedDuringItsCheckIsNotKept: the gateway keeps a token
// that passed for a long while (an hour here), yet after ForgetTokens,
// which a revoke calls, the token's next request is refused; a check that
// read the token before the revoke and answered after it does not keep
// it either.
func TestATokenRevokedDuringItsCheckIsNotKept(t *testing.T) {
	f := &stubFleet{}
	toks := &heldTokens{read: make(chan struct{}), release: make(chan struct{})}
	g, err := New(Options{Catalog: f, Fleet: f, Tokens: toks, TokenEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(tok string) *apiError {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		_, aerr := g.authenticate(r)
		return aerr
	}
	read := toks.read
	first := make(chan *apiError, 1)
	go func() { first <- ask("good") }()
	<-read
	toks.mu.Lock()
	toks.revoked = true
	toks.mu.Unlock()
	g.ForgetTokens()
	close(toks.release)
	if aerr := <-first; aerr != nil {
		t.Fatalf("the request checked before the revoke: %v", aerr.Message)
	}
	if aerr := ask("good"); aerr == nil || aerr.status != http.StatusUnauthorized {
		t.Errorf("the token's request after its revoke passed, from what a check begun before it kept")
	}

	// Kept, then forgotten.
	toks.mu.Lock()
	toks.revoked = false
	toks.mu.Unlock()
	if aerr := ask("good"); aerr != nil {
		t.Fatalf("the good token: %v", aerr.Message)
	}
	toks.mu.Lock()
	toks.revoked = true
	toks.mu.Unlock()
	if ask("good") != nil {
		t.Fatal("the kept token was asked about again within its while; the test proves nothing")
	}
	g.ForgetTokens()
	if aerr := ask("good"); aerr == nil || aerr.status != http.StatusUnauthorized {
		t.Errorf("a token forgotten and revoked still passes")
	}
}

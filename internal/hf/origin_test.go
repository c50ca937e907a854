package hf

import (
	"net/http"
	"testing"
)

// The rule Open applies to every request it sends, redirects included:
// the token goes to the endpoint's own scheme, host and port, and nowhere
// else.
func TestAuthorizeOnlyTheEndpoint(t *testing.T) {
	client := func(endpoint, token string) *Client {
		t.Helper()
		c, err := NewClient(Options{Endpoint: endpoint, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	hub := client("https://huggingface.co/", "hf_secret")
	local := client("http://127.0.0.1:8080", "hf_secret")
	anon := client("https://huggingface.co", "")
	for _, tc := range []struct {
		name string
		c    *Client
		url  string
		want bool
	}{
		{"the endpoint", hub, "https://huggingface.co/api/models/a/b", true},
		{"the endpoint with its default port", hub, "https://huggingface.co:443/a/b/resolve/main/x", true},
		{"host names ignore case", hub, "https://HuggingFace.co/a", true},
		{"the CDN, a subdomain", hub, "https://cdn-lfs.huggingface.co/repos/x", false},
		{"plain http", hub, "http://huggingface.co/a", false},
		{"another host", hub, "https://example.com/a", false},
		{"same address, another port", local, "http://127.0.0.1:8081/repos/x", false},
		{"same address and port", local, "http://127.0.0.1:8080/a", true},
		{"no token", anon, "https://huggingface.co/a", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", tc.url, nil)
			tc.c.authorize(req)
			if got := req.Header.Get("Authorization") == "Bearer hf_secret"; got != tc.want {
				t.Errorf("authorized %v, want %v", got, tc.want)
			}
		})
	}
}

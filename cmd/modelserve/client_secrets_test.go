package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestClientPrintsNoSecret: a terminal's environment holds the API token
// (MODELSERVE_TOKEN) and may hold a password in the server's address
// (MODELSERVE_URL=http://user:password@host). Neither is printed: not as
// a flag's default in --help, not in the error when the server is down,
// refuses the token or the address is not one.
func TestClientPrintsNoSecret(t *testing.T) {
	const token, password = "tok-sEcReT-4711", "pAsS-sEcReT-0815"
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error": "the token is not one this server made"}`, http.StatusUnauthorized)
	}))
	defer refusing.Close()
	down := "http://alice:" + password + "@" + freeAddr(t) // nothing listens there
	up := strings.Replace(refusing.URL, "http://", "http://alice:"+password+"@", 1)

	cases := []struct {
		name, url string
		args      []string
	}{
		{"model plan --help", down, []string{"model", "plan", "--help"}},
		{"model serve --help", down, []string{"model", "serve", "--help"}},
		{"model list --help", down, []string{"model", "list", "--help"}},
		{"chat --help", down, []string{"chat", "--help"}},
		{"serve --help", down, []string{"serve", "--help"}},
		{"a server that is down", down, []string{"model", "list"}},
		{"a server that is down, chatting", down, []string{"chat", "tiny", "hello"}},
		{"a server that refuses the token", up, []string{"model", "list"}},
		{"an address that is not one", "http://alice:" + password + "@127.0.0.1:port", []string{"model", "list"}},
		{"an address of another scheme", "ftp://alice:" + password + "@127.0.0.1", []string{"model", "list"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"MODELSERVE_URL": tc.url, "MODELSERVE_TOKEN": token,
				"MODELSERVE_SESSION_SECRET": password + password, "MODELSERVE_METRICS_TOKEN": token}
			var out, errb bytes.Buffer
			err := run(context.Background(), tc.args, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errb)
			printed := out.String() + errb.String()
			if err != nil {
				printed += "\n" + err.Error()
			}
			if strings.HasSuffix(tc.name, "--help") && !strings.Contains(printed, "(env MODELSERVE_") {
				t.Fatalf("%s printed no flags:\n%s", tc.name, printed)
			}
			if !strings.HasSuffix(tc.name, "--help") && err == nil {
				t.Fatalf("%s: no error; printed %s", tc.name, printed)
			}
			for _, secret := range []string{token, password} {
				if strings.Contains(printed, secret) {
					t.Errorf("%s printed a secret (%s):\n%s", tc.name, secret, printed)
				}
			}
		})
	}
}

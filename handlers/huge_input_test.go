package handlers_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// mib is a megabyte of input, sent where a field takes a few words.
var mib = strings.Repeat("x", 1<<20)

// nearlyMiB fits in a JSON body or a form, which are taken up to 1 MiB.
var nearlyMiB = mib[:1<<20-1024]

// manyNames is nearly a megabyte of short names (a JSON body is taken up
// to 1 MiB), each of which passes alone.
var manyNames = func() []string {
	names := make([]string, 1<<20/10)
	for i := range names {
		names[i] = "n" + strconv.Itoa(i)
	}
	return names
}()

// TestHugeInputIsNotEchoed: a megabyte sent to any field comes back as a
// few hundred bytes that say the rest was cut: in the answer's body, in
// its headers (a redirect's Location) and in the server's log lines.
func TestHugeInputIsNotEchoed(t *testing.T) {
	e := newConsoleEnv(t)
	e.reg.add(ggufRepo("acme/tiny"))
	api := newAPIClient(t, e)
	b := e.signedIn()
	serve := func(field string, v any) func() *http.Response {
		return func() *http.Response {
			body, _ := json.Marshal(map[string]any{"repo": "acme/tiny", field: v})
			req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/api/v1/serve", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+api.tok)
			return mustDo(t, req)
		}
	}
	apiGet := func(path string) func() *http.Response {
		return func() *http.Response {
			req, _ := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
			req.Header.Set("Authorization", "Bearer "+api.tok)
			return mustDo(t, req)
		}
	}
	for _, tc := range []struct {
		name string
		send func() *http.Response
		// said: the answer quotes the input, and says it was cut; else
		// it leaves the input out (a redirect to a page without it).
		said bool
	}{
		{"jobs limit", apiGet("/api/v1/jobs?limit=" + mib), true},
		{"jobs offset", apiGet("/api/v1/jobs?offset=" + mib), true},
		{"jobs before", apiGet("/api/v1/jobs?before=" + mib), true},
		{"repository name", apiGet("/api/v1/repos/acme/" + mib), true},
		{"repository context", apiGet("/api/v1/repos/acme/tiny?context=" + mib), true},
		{"updates limit", apiGet("/api/v1/updates?limit=" + mib), true},
		{"updates before", apiGet("/api/v1/updates?before=" + mib), true},
		{"serve format", serve("format", nearlyMiB), true},
		{"serve engine", serve("engine", nearlyMiB), true},
		{"serve class", serve("class", nearlyMiB), true},
		{"serve name", serve("name", nearlyMiB), true},
		{"serve aliases", serve("aliases", []string{nearlyMiB}), true},
		{"serve guard format", serve("guard_format", nearlyMiB), true},
		{"serve quant", serve("quant", nearlyMiB), true},
		{"serve file", serve("file", nearlyMiB), true},
		{"serve projector", serve("projector", nearlyMiB), true},
		{"serve description", serve("description", nearlyMiB), true},
		{"serve many aliases", serve("aliases", manyNames), false},
		{"console token name", func() *http.Response {
			return b.post("/tokens", url.Values{"name": {nearlyMiB}})
		}, true},
		{"console serve name", func() *http.Response {
			return b.post("/serve", url.Values{"repo": {"acme/tiny"}, "name": {nearlyMiB}})
		}, true},
		{"console serve description", func() *http.Response {
			return b.post("/serve", url.Values{"repo": {"acme/tiny"}, "description": {nearlyMiB}})
		}, true},
		{"console serve aliases", func() *http.Response {
			return b.post("/serve", url.Values{"repo": {"acme/tiny"}, "aliases": {nearlyMiB}})
		}, true},
		{"console serve settings", func() *http.Response {
			return b.post("/serve", url.Values{"repo": {"acme/tiny"}, "env": {nearlyMiB}})
		}, true},
		{"console sign-in name", func() *http.Response {
			return e.browser().signIn(nearlyMiB, "wrong", "")
		}, true},
		{"console search", func() *http.Response { return b.get("/serve/search?q=" + mib) }, false},
		{"console search fragment", func() *http.Response { return b.get("/serve/search?q="+mib, htmx...) }, false},
		{"console report", func() *http.Response { return b.get("/serve/report?repo=" + mib) }, false},
		{"sign-in next", func() *http.Response { return e.browser().get("/login?next=/jobs%3Fq%3D" + mib) }, false},
		{"signed out, sent to sign in", func() *http.Response { return e.browser().get("/jobs?q=" + mib) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.logs.Reset()
			resp := tc.send()
			got := body(t, resp)
			var head bytes.Buffer
			resp.Header.Write(&head)
			if len(got) > 16<<10 || head.Len() > 2<<10 {
				t.Errorf("%s: a megabyte of input came back as %d bytes of body and %d of headers:\n%.400s…",
					resp.Status, len(got), head.Len(), head.String()+got)
			}
			if tc.said && !strings.Contains(got, "MB cut)") {
				t.Errorf("%s: the answer does not say the input was cut:\n%.2000s", resp.Status, got)
			}
			for _, line := range strings.Split(e.logs.String(), "\n") {
				if len(line) > 2<<10 {
					t.Errorf("a log line of %d bytes: %.300s…", len(line), line)
				}
			}
		})
	}
}

func mustDo(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestSignInCarriesNoToken: a token put in a console URL by mistake is
// neither carried through the sign-in page (the redirect's Location, the
// form's next) nor written in the access log's lines of either request.
func TestSignInCarriesNoToken(t *testing.T) {
	e := newConsoleEnv(t)
	const tok = "ms_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefg"
	for _, path := range []string{"/jobs?access_token=" + tok, "/jobs?page=2&q=" + tok} {
		e.logs.Reset()
		b := e.browser()
		resp := b.get(path)
		loc := resp.Header.Get("Location")
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/login?next=") {
			t.Fatalf("%s: %s to %q, want a redirect to sign in", path, resp.Status, loc)
		}
		page := body(t, b.get(loc))
		if strings.Contains(loc, tok) || strings.Contains(page, tok) || strings.Contains(e.logs.String(), tok) {
			t.Errorf("%s: the token went on: Location %q, in the page %v, in the log:\n%s",
				path, loc, strings.Contains(page, tok), e.logs.String())
		}
		if !strings.Contains(loc, "jobs") {
			t.Errorf("%s: the sign-in forgot where the visitor was going: %q", path, loc)
		}
	}
}

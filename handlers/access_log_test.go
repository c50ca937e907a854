package handlers_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"modelserve/internal/auth"
)

// accessLine is the access log's line for method and path, or "".
func accessLine(logs, method, path string) string {
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "msg=request") && strings.Contains(l, "method="+method) && (strings.Contains(l, "path="+path) || strings.Contains(l, `path="`+path)) {
			return l
		}
	}
	return ""
}

// TestAccessLogNamesWhoAsked: each request is a line with its method, path,
// status and duration, and the console user or the API token's name;
// a secret in the query never reaches the log.
func TestAccessLogNamesWhoAsked(t *testing.T) {
	e := newConsoleEnv(t)
	b := e.signedIn()
	resp := b.get("/jobs?page=1")
	resp.Body.Close()

	tok, err := auth.NewTokens(e.db).Create(context.Background(), "nightly-script")
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/api/v1/jobs?limit=5&token=hunter2", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	req, _ = http.NewRequest(http.MethodDelete, e.srv.URL+"/api/v1/jobs", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	logs := e.logs.String()
	page := accessLine(logs, "GET", "/jobs?page=1")
	if page == "" || !strings.Contains(page, "status=200") || !strings.Contains(page, "user=ada") || !strings.Contains(page, "duration=") {
		t.Errorf("the console request's line %q: want status=200, duration and user=ada", page)
	}
	api := accessLine(logs, "GET", "/api/v1/jobs?")
	if api == "" || !strings.Contains(api, "token=nightly-script") || !strings.Contains(api, "status=200") {
		t.Errorf("the API request's line %q: want token=nightly-script and status=200", api)
	}
	if strings.Contains(logs, "hunter2") || strings.Contains(logs, tok) {
		t.Error("a secret reached the log")
	}
	if wrong := accessLine(logs, "DELETE", "/api/v1/jobs"); !strings.Contains(wrong, "status=405") {
		t.Errorf("the wrong method's line %q: want status=405", wrong)
	}
}

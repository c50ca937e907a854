package accesslog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"modelserve/internal/accesslog"
)

func TestPathRedactsSecrets(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"/jobs", "/jobs"},
		{"/jobs?page=2", "/jobs?page=2"},
		{"/api/v1/jobs?limit=5&token=hunter2", "/api/v1/jobs?limit=5&token=redacted"},
		{"/login?next=%2Fjobs&password=x&api_key=y", "/login?api_key=redacted&next=%2Fjobs&password=redacted"},
		{"/jobs?csrf=abc", "/jobs?csrf=redacted"},
		// A token under a key of no secret name is known by its shape,
		// and so is one inside the next a sign-in carries.
		{"/jobs?q=hf_AbCdEfGhIjKlMnOpQr", "/jobs?q=redacted"},
		{"/login?next=%2Fjobs%3Faccess_token%3Dabc", "/login?next=%2Fjobs%3Faccess_token%3Dredacted"},
	} {
		u, err := url.Parse(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := accesslog.Path(u); got != tt.want {
			t.Errorf("Path(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// A megabyte of URL is a log line of a few hundred bytes that says how
// much of it was cut.
func TestLineOfAHugeRequestIsShort(t *testing.T) {
	var buf bytes.Buffer
	h := accesslog.Handler(slog.New(slog.NewTextHandler(&buf, nil)), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accesslog.SetUser(r.Context(), strings.Repeat("u", 1<<20))
	}))
	huge := strings.Repeat("x", 1<<20)
	for _, target := range []string{"/" + huge, "/jobs?q=" + huge} {
		buf.Reset()
		req := httptest.NewRequest(http.MethodGet, target, nil)
		req.RemoteAddr = huge
		h.ServeHTTP(httptest.NewRecorder(), req)
		if line := buf.String(); len(line) > 2<<10 || strings.Count(line, "MB cut)")+strings.Count(line, "MB left out)") != 3 {
			t.Errorf("the line of a request of %d bytes is %d bytes long: %.600s", len(target), len(line), line)
		}
	}
}

// A handler that asks late, after slow work of its own, learns when the
// request came, not when it asked, and the request's line is timed then:
// its time and its duration say when it came and when it was done.
// Without the middleware a handler learns that nobody knows.
func TestArrivedIsWhenTheRequestCame(t *testing.T) {
	const slow = 30 * time.Millisecond
	var arrived, asked time.Time
	var known bool
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	h := accesslog.Handler(log, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(slow)
		asked = time.Now()
		arrived, known = accesslog.Arrived(r.Context())
	}))
	before := time.Now()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/v1/models", nil))
	done := time.Now()
	if !known {
		t.Fatal("Arrived says it does not know, under the middleware")
	}
	if arrived.Before(before) || asked.Sub(arrived) < slow {
		t.Errorf("arrived %s after the request was made and %s before the handler asked; want ≥ 0 and ≥ %s",
			arrived.Sub(before), asked.Sub(arrived), slow)
	}
	var line struct {
		Time     time.Time     `json:"time"`
		Duration time.Duration `json:"duration"`
	}
	if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
		t.Fatalf("the access log's line %q: %v", logs.String(), err)
	}
	if !line.Time.Equal(arrived) {
		t.Errorf("the line is timed %s, %s after the request arrived; want its arrival", line.Time, line.Time.Sub(arrived))
	}
	if end := line.Time.Add(line.Duration); end.Before(asked) || end.After(done) {
		t.Errorf("the line's time and duration end %s after the handler asked and %s before the middleware was done; want both ≥ 0",
			end.Sub(asked), done.Sub(end))
	}
	if _, known := accesslog.Arrived(context.Background()); known {
		t.Error("Arrived says it knows, with no middleware")
	}
}

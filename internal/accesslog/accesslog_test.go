package accesslog_test

import (
	"net/url"
	"testing"

	"modelserve/internal/accesslog"
)

func TestPathRedactsSecrets(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"/jobs", "/jobs"},
		{"/jobs?page=2", "/jobs?page=2"},
		{"/api/v1/jobs?limit=5&token=hunter2", "/api/v1/jobs?limit=5&token=redacted"},
		{"/login?next=%2Fjobs&password=x&api_key=y", "/login?api_key=redacted&next=%2Fjobs&password=redacted"},
		{"/jobs?csrf=abc", "/jobs?csrf=redacted"},
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

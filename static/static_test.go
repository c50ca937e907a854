package static

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, path string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, req)
	return rec
}

func TestPathIsCacheBusted(t *testing.T) {
	for name, want := range map[string]string{
		"app.css":                          `^/static/app\.[0-9a-f]{10}\.css$`,
		"vendor/htmx-2.0.11.min.js":        `^/static/vendor/htmx-2\.0\.11\.min\.[0-9a-f]{10}\.js$`,
		"vendor/htmx-ext-sse-2.2.4.min.js": `^/static/vendor/htmx-ext-sse-2\.2\.4\.min\.[0-9a-f]{10}\.js$`,
		"vendor/pico-2.1.1.min.css":        `^/static/vendor/pico-2\.1\.1\.min\.[0-9a-f]{10}\.css$`,
	} {
		if got := Path(name); !regexp.MustCompile(want).MatchString(got) {
			t.Errorf("Path(%q) = %q", name, got)
		}
	}
}

func TestHandler(t *testing.T) {
	hashed := get(t, Path("app.css"))
	if hashed.Code != http.StatusOK || !strings.Contains(hashed.Header().Get("Cache-Control"), "immutable") ||
		!strings.HasPrefix(hashed.Header().Get("Content-Type"), "text/css") {
		t.Fatalf("hashed name: %d, %v", hashed.Code, hashed.Header())
	}
	plain := get(t, "/static/app.css")
	if plain.Code != http.StatusOK || plain.Header().Get("Cache-Control") != "no-cache" || plain.Body.String() != hashed.Body.String() {
		t.Fatalf("plain name: %d, %v", plain.Code, plain.Header())
	}
	if rec := get(t, "/static/app.css", "If-None-Match", hashed.Header().Get("ETag")); rec.Code != http.StatusNotModified {
		t.Fatalf("revalidation: %d, want 304", rec.Code)
	}
	if js := get(t, Path("vendor/htmx-2.0.11.min.js")); !strings.Contains(js.Header().Get("Content-Type"), "javascript") {
		t.Fatalf("htmx served as %q", js.Header().Get("Content-Type"))
	}
	for _, p := range []string{"/static/nothing.css", "/static/app.0000000000.css", "/static/../static.go", "/static/static.go"} {
		if rec := get(t, p); rec.Code != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", p, rec.Code)
		}
	}
}

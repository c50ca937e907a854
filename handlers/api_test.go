package handlers_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"

	"modelserve/handlers"
	"modelserve/internal/auth"
	"modelserve/internal/mirror"
)

// apiClient calls the API with a token of its own.
type apiClient struct {
	t   *testing.T
	e   *consoleEnv
	tok string
}

func newAPIClient(t *testing.T, e *consoleEnv) *apiClient {
	t.Helper()
	tok, err := auth.NewTokens(e.db).Create(context.Background(), fmt.Sprintf("api-%d", time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	return &apiClient{t: t, e: e, tok: tok}
}

// do sends body (nil for none) and returns the answer with its body read.
func (c *apiClient) do(method, path string, body any) (*http.Response, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.e.srv.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+c.tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// TestAPIWrongMethodIs405: every API route, asked with a method it does not
// take, answers 405 and says in Allow which it does; a path no route has
// is still 404.
func TestAPIWrongMethodIs405(t *testing.T) {
	e := newConsoleEnv(t)
	c := newAPIClient(t, e)
	for _, tt := range []struct {
		name, method, path, allow string
	}{
		{"serve", http.MethodGet, "/api/v1/serve", "POST"},
		{"jobs", http.MethodDelete, "/api/v1/jobs", "GET, HEAD"},
		{"a job", http.MethodPost, "/api/v1/jobs/serve-1-ab", "GET, HEAD"},
		{"a job's events", http.MethodPost, "/api/v1/jobs/serve-1-ab/events", "GET, HEAD"},
		{"cancel", http.MethodGet, "/api/v1/jobs/serve-1-ab/cancel", "POST"},
		{"retry", http.MethodGet, "/api/v1/jobs/serve-1-ab/retry", "POST"},
		{"catalog", http.MethodPost, "/api/v1/catalog", "GET, HEAD"},
		{"a model", http.MethodPut, "/api/v1/catalog/tiny", "GET, HEAD, DELETE"},
		{"scale", http.MethodGet, "/api/v1/catalog/tiny/scale", "POST"},
		{"unpark", http.MethodGet, "/api/v1/catalog/tiny/unpark", "POST"},
		{"check", http.MethodGet, "/api/v1/catalog/tiny/check", "POST"},
		{"a model's updates", http.MethodPost, "/api/v1/catalog/tiny/updates", "GET, HEAD, PUT"},
		{"updates", http.MethodPost, "/api/v1/updates", "GET, HEAD"},
		{"an update", http.MethodDelete, "/api/v1/updates/1", "GET, HEAD"},
		{"a model's evals", http.MethodPost, "/api/v1/catalog/tiny/evals", "GET, HEAD, PUT"},
		{"run the evals", http.MethodGet, "/api/v1/catalog/tiny/evals/run", "POST"},
		{"an eval run", http.MethodDelete, "/api/v1/evals/runs/1", "GET, HEAD"},
		{"mirror", http.MethodPost, "/api/v1/mirror", "GET, HEAD"},
		{"repo", http.MethodPost, "/api/v1/repos/test/tiny-GGUF", "GET, HEAD"},
		{"nodes", http.MethodPut, "/api/v1/nodes", "GET, HEAD"},
		{"replicas", http.MethodDelete, "/api/v1/replicas", "GET, HEAD"},
		{"stop", http.MethodGet, "/api/v1/replicas/tiny-1/stop", "POST"},
		{"restart", http.MethodGet, "/api/v1/replicas/tiny-1/restart", "POST"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := c.do(tt.method, tt.path, nil)
			if resp.StatusCode != http.StatusMethodNotAllowed {
				t.Fatalf("%s %s: %s, want 405\n%s", tt.method, tt.path, resp.Status, body)
			}
			if got := resp.Header.Get("Allow"); got != tt.allow {
				t.Errorf("Allow: %q, want %q", got, tt.allow)
			}
			var out struct{ Error string }
			if json.Unmarshal(body, &out) != nil || !strings.Contains(out.Error, tt.method) {
				t.Errorf("the answer does not say %s is the wrong method: %s", tt.method, body)
			}
		})
	}
	if resp, body := c.do(http.MethodGet, "/api/v1/nothing", nil); resp.StatusCode != http.StatusNotFound || resp.Header.Get("Allow") != "" {
		t.Errorf("a path no route has: %s, Allow %q\n%s", resp.Status, resp.Header.Get("Allow"), body)
	}
}

// snakeCase fails the test for any key of v (at any depth) that is not
// lower_snake_case, the API's one naming style.
func snakeCase(t *testing.T, where string, v any) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			if strings.IndexFunc(k, func(r rune) bool { return unicode.IsUpper(r) || r == ' ' || r == '-' }) >= 0 {
				t.Errorf("%s has the key %q; the API names fields in snake_case", where, k)
			}
			snakeCase(t, where+"."+k, child)
		}
	case []any:
		for i, child := range v {
			snakeCase(t, fmt.Sprintf("%s[%d]", where, i), child)
		}
	}
}

// TestAPIMirrorFieldNames: the mirror's files are named like every other
// route's fields.
func TestAPIMirrorFieldNames(t *testing.T) {
	e := newConsoleEnv(t)
	content := []byte("GGUF: a file on the mirror")
	src := filepath.Join(t.TempDir(), "model-Q4_K_M.gguf")
	if err := os.WriteFile(src, content, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	if _, err := e.mirror.Fetch(context.Background(), []mirror.File{{Model: "tiny", Revision: "c0ffee0", Path: "model-Q4_K_M.gguf",
		URL: "file://" + src, Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:])}}, nil); err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(apiGet(t, e, "/api/v1/mirror")), &out); err != nil {
		t.Fatal(err)
	}
	snakeCase(t, "GET /api/v1/mirror", out)
	files, _ := out["files"].([]any)
	if len(files) != 1 {
		t.Fatalf("files: %v", out)
	}
	f := files[0].(map[string]any)
	want := map[string]any{"model": "tiny", "revision": "c0ffee0", "path": "model-Q4_K_M.gguf", "state": "present",
		"sha256": hex.EncodeToString(sum[:]), "bytes_done": float64(len(content)), "bytes_total": float64(len(content))}
	for k, v := range want {
		if f[k] != v {
			t.Errorf("%s is %v, want %v", k, f[k], v)
		}
	}
}

// TestAPINodesInBytes: the pool's nodes say their memory in bytes, as the
// fleet's beside them do, and nothing in GB.
func TestAPINodesInBytes(t *testing.T) {
	e := newConsoleEnv(t, func(d *handlers.Deps) { d.Pool, d.Fleet = poolOf(t, twoNodes), busyFleet() })
	raw := apiGet(t, e, "/api/v1/nodes")
	if strings.Contains(raw, "_gb") {
		t.Errorf("a field in GB is still served:\n%s", raw)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		t.Fatal(err)
	}
	snakeCase(t, "GET /api/v1/nodes", out)
	var typed struct {
		Nodes []struct {
			Name         string `json:"name"`
			RAMBytes     int64  `json:"ram_bytes"`
			FreeRAMBytes int64  `json:"free_ram_bytes"`
			GPUs         []struct {
				Class string `json:"class"`
				Count int    `json:"count"`
			} `json:"gpus"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(raw), &typed); err != nil {
		t.Fatal(err)
	}
	if len(typed.Nodes) != 2 {
		t.Fatalf("nodes: %s", raw)
	}
	gpu := typed.Nodes[0]
	if gpu.Name != "gpu-1" || gpu.RAMBytes != 256<<30 || gpu.FreeRAMBytes != 200<<30 || len(gpu.GPUs) != 1 || gpu.GPUs[0].Count != 2 {
		t.Errorf("gpu-1 is %+v, want 256 GiB with 200 free in bytes and its 2 L4s", gpu)
	}
}

// TestAPIServeWithoutReplicasServesOne: a script that names no replicas
// gets one running, as the console's form does; 0 still means on demand.
func TestAPIServeWithoutReplicasServesOne(t *testing.T) {
	e := newConsoleEnv(t)
	e.reg.add(ggufRepo("test/tiny-GGUF"))
	c := newAPIClient(t, e)
	for _, tt := range []struct {
		name string
		body map[string]any
		want int
	}{
		{"left out", map[string]any{"repo": "test/tiny-GGUF"}, 1},
		{"zero", map[string]any{"repo": "test/tiny-GGUF", "replicas": 0}, 0},
		{"three", map[string]any{"repo": "test/tiny-GGUF", "replicas": 3}, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := c.do(http.MethodPost, "/api/v1/serve", tt.body)
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("%s\n%s", resp.Status, body)
			}
			var j struct {
				Request struct {
					Replicas int `json:"replicas"`
				} `json:"request"`
			}
			if err := json.Unmarshal(body, &j); err != nil {
				t.Fatal(err)
			}
			if j.Request.Replicas != tt.want {
				t.Errorf("replicas %d, want %d", j.Request.Replicas, tt.want)
			}
		})
	}
	// A misspelt field is still refused, not taken for a missing one.
	if resp, body := c.do(http.MethodPost, "/api/v1/serve", map[string]any{"repo": "test/tiny-GGUF", "replica": 2}); resp.StatusCode != http.StatusBadRequest ||
		!strings.Contains(string(body), "replica") {
		t.Errorf("a misspelt replicas: %s\n%s", resp.Status, body)
	}
}

// TestAPIJobsPageByCursor: following next from the first page lists every
// job once, newest first, whatever starts meanwhile; offset still works.
func TestAPIJobsPageByCursor(t *testing.T) {
	e := newConsoleEnv(t)
	start := time.Now().Add(-time.Hour)
	tx, err := e.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	// Two jobs in each second, so the cursor must break ties by id.
	for i := range 120 {
		insertJob(t, tx, doneJob(fmt.Sprintf("serve-%d-%08x", start.Unix()+int64(i/2), i), start.Add(time.Duration(i/2)*time.Second)))
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	c := newAPIClient(t, e)
	type page struct {
		Jobs []struct {
			ID      string    `json:"id"`
			Started time.Time `json:"started"`
		} `json:"jobs"`
		Total int    `json:"total"`
		Next  string `json:"next"`
	}
	get := func(path string) page {
		t.Helper()
		resp, body := c.do(http.MethodGet, path, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s\n%s", path, resp.Status, body)
		}
		var p page
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var seen []string
	next, pages := "/api/v1/jobs?limit=50", 0
	for next != "" {
		p := get(next)
		if want := 120 + min(pages, 1); p.Total != want {
			t.Errorf("page %d says %d jobs in all, want %d", pages+1, p.Total, want)
		}
		for _, j := range p.Jobs {
			seen = append(seen, j.ID)
		}
		next, pages = p.Next, pages+1
		if pages == 1 {
			// A job started after the first page does not shift the next.
			mustInsertJob(t, e.db, doneJob(fmt.Sprintf("serve-%d-%08x", time.Now().Unix(), 999), time.Now()))
		}
		if pages > 5 {
			t.Fatal("next never ends")
		}
	}
	if len(seen) != 120 {
		t.Fatalf("listed %d jobs across %d pages, want the 120 there were", len(seen), pages)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] >= seen[i-1] {
			t.Fatalf("job %d (%s) is not older than the one before it (%s)", i, seen[i], seen[i-1])
		}
	}
	byOffset := get("/api/v1/jobs?limit=50&offset=51") // 51: the new job is first
	if len(byOffset.Jobs) != 50 || byOffset.Jobs[0].ID != seen[50] {
		t.Errorf("?offset=51 starts at %v, want %s", byOffset.Jobs, seen[50])
	}
	if resp, body := c.do(http.MethodGet, "/api/v1/jobs?before=serve-0-nothing", nil); resp.StatusCode != http.StatusBadRequest ||
		!strings.Contains(string(body), "serve-0-nothing") {
		t.Errorf("a cursor naming no job: %s\n%s", resp.Status, body)
	}
}

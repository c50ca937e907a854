package handlers_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/handlers"
	"modelserve/internal/mirror"
	"modelserve/internal/plan"
)

func tinyModel(name string) catalog.Model {
	return catalog.Model{
		Name: name, Aliases: []string{name + "-chat"}, ContextLength: 4096, RoutingProfile: "chat",
		Source:   "http://127.0.0.1:8080/mirror/" + name + "/c0ffee0/model-Q4_K_M.gguf",
		Profiles: []catalog.Profile{{Name: "cpu", Engine: "llamacpp", Size: catalog.Size{Pool: 16384, Slots: 4}, RAMBytes: 1288490189}},
		Scaling:  catalog.Scaling{Min: 1, Max: 2}, Capabilities: catalog.Capabilities{Tools: true},
		Origin: &catalog.Origin{Repo: "test/" + name + "-GGUF", Revision: strings.Repeat("c0ffee", 7)[:40]},
	}
}

func TestCatalogPage(t *testing.T) {
	e := newConsoleEnv(t)
	ctx := context.Background()
	for _, n := range []string{"tiny", "small"} {
		if err := e.catalog.Add(ctx, tinyModel(n), "test"); err != nil {
			t.Fatal(err)
		}
	}
	b := e.signedIn()
	doc := mustStatus(t, b.get("/catalog"), http.StatusOK)
	rows := doc.Find(`[data-testid="model-row"]`)
	if rows.Length() != 2 {
		t.Fatalf("%d models listed, want 2", rows.Length())
	}
	row := doc.Find(`[data-testid="model-row"][data-model="tiny"]`)
	for what, want := range map[string]string{
		`[data-testid="origin"]`: "test/tiny-GGUF",
		`[data-testid="wanted"]`: "1 to 2",
		"[data-testid=runs]":     "a 16384-token pool in 4 slots of 4096 tokens; 1.3 GB of RAM",
	} {
		if got := row.Find(what).Text(); got != want {
			t.Errorf("%s reads %q, want %q", what, got, want)
		}
	}
	if got := texts(row.Find(".tag")); strings.Join(got, " ") != "chat tools" {
		t.Errorf("capabilities %q", got)
	}
	remove := row.Find(`form[action="/catalog/tiny/remove"]`)
	if !strings.Contains(remove.AttrOr("hx-confirm", ""), "Remove tiny") {
		t.Error("removal is not confirmed (hx-confirm)")
	}

	// Without JavaScript, the form first asks on a page of its own.
	doc = mustStatus(t, b.post("/catalog/tiny/remove", nil), http.StatusOK)
	if doc.Find(`[data-testid="confirm"] input[name="confirm"][value="yes"]`).Length() != 1 {
		t.Fatal("no confirmation page")
	}
	if _, err := e.catalog.Get(ctx, "tiny"); err != nil {
		t.Fatal("asking removed the model")
	}
	resp := b.post("/catalog/tiny/remove", url.Values{"confirm": {"yes"}})
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("remove: %s", resp.Status)
	}
	if _, err := e.catalog.Get(ctx, "tiny"); err == nil {
		t.Fatal("the model is still in the catalog")
	}
	doc = mustStatus(t, b.get(resp.Header.Get("Location")), http.StatusOK)
	if got := doc.Find(`[data-testid="notice"]`).Text(); got != "tiny was removed from the catalog." {
		t.Errorf("notice %q", got)
	}
	// A link cannot make the page say a model it lists was removed.
	doc = mustStatus(t, b.get("/catalog?removed=small"), http.StatusOK)
	if doc.Find(`[data-testid="notice"]`).Length() != 0 {
		t.Error("the page claims a listed model was removed")
	}
	doc = mustStatus(t, b.post("/catalog/nothing/remove", url.Values{"confirm": {"yes"}}), http.StatusNotFound)
	if got := doc.Find(`[role="alert"]`).Text(); !strings.Contains(got, "nothing") {
		t.Errorf("removing a missing model says %q", got)
	}
}

func TestCatalogPageSaysTheIdleTime(t *testing.T) {
	e := newConsoleEnv(t)
	ctx := context.Background()
	for name, sc := range map[string]catalog.Scaling{
		"lazy":   {Min: 0, Max: 1, IdleAfter: 30 * time.Second},
		"usual":  {Min: 1, Max: 2},
		"pinned": {Min: 2, Max: 2, IdleAfter: time.Minute},
	} {
		m := tinyModel(name)
		m.Aliases, m.Scaling = nil, sc
		if err := e.catalog.Add(ctx, m, "test"); err != nil {
			t.Fatal(err)
		}
	}
	doc := mustStatus(t, e.signedIn().get("/catalog"), http.StatusOK)
	for name, want := range map[string]string{
		"lazy":   "idle after 30 s",
		"usual":  "idle after 15 min (the default)",
		"pinned": "", // keeps every replica it may run: none stops idle
	} {
		if got := doc.Find(`[data-model="` + name + `"] [data-testid="idle-after"]`).Text(); got != want {
			t.Errorf("%s: the catalog says %q, want %q", name, got, want)
		}
	}
}

func TestMirrorPage(t *testing.T) {
	e := newConsoleEnv(t)
	// A real fetch, from a local file.
	src := filepath.Join(t.TempDir(), "model-Q4_K_M.gguf")
	content := []byte("GGUF: not really a model, but bytes to check")
	if err := os.WriteFile(src, content, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	if _, err := e.mirror.Fetch(context.Background(), []mirror.File{{Model: "tiny", Revision: "c0ffee0", Path: "model-Q4_K_M.gguf",
		URL: "file://" + src, Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:])}}, nil); err != nil {
		t.Fatal(err)
	}
	b := e.signedIn()
	doc := mustStatus(t, b.get("/mirror"), http.StatusOK)
	rows := doc.Find(`[data-testid="file-row"]`)
	if rows.Length() != 1 {
		t.Fatalf("%d files listed, want 1", rows.Length())
	}
	if got := texts(rows.Find("td")); got[0] != "tiny" || got[1] != "c0ffee0" || got[2] != "model-Q4_K_M.gguf" ||
		got[4] != hex.EncodeToString(sum[:])[:12]+"…" || got[5] != "✓ present" {
		t.Errorf("the row reads %q", got)
	}
	resp := b.post("/mirror", url.Values{"model": {"tiny"}, "revision": {"c0ffee0"}, "path": {"model-Q4_K_M.gguf"}, "confirm": {"yes"}})
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("remove: %s", resp.Status)
	}
	doc = mustStatus(t, b.get(resp.Header.Get("Location")), http.StatusOK)
	if doc.Find(`[data-testid="file-row"]`).Length() != 0 || doc.Find(`[data-testid="notice"]`).Length() != 1 {
		t.Error("the file is still listed, or its removal not said")
	}
	doc = mustStatus(t, b.post("/mirror", url.Values{"model": {"tiny"}, "revision": {"c0ffee0"}, "path": {"gone.gguf"}, "confirm": {"yes"}}),
		http.StatusConflict)
	if got := doc.Find(`[role="alert"]`).Text(); !strings.Contains(got, "gone.gguf") {
		t.Errorf("removing a missing file says %q", got)
	}
}

var twoNodes = `[
	{"name": "gpu-1", "cpu_cores": 32, "ram_gb": 256, "free_ram_gb": 200, "gpus": [{"class": "L4", "count": 2}]},
	{"name": "cpu-1", "cpu_cores": 8, "ram_gb": 32}
]`

// poolOf is a pool of the nodes nodesJSON declares, as the fleet's Pool
// hands them to the handlers.
func poolOf(t *testing.T, nodesJSON string) staticPool {
	t.Helper()
	nodes, err := plan.ParseNodes("test", []byte(nodesJSON))
	if err != nil {
		t.Fatal(err)
	}
	return staticPool(nodes)
}

type staticPool []plan.Node

func (p staticPool) Nodes() []plan.Node { return p }

func TestFleetPage(t *testing.T) {
	e := newConsoleEnv(t, func(d *handlers.Deps) { d.Pool = poolOf(t, twoNodes) })
	doc := mustStatus(t, e.signedIn().get("/fleet"), http.StatusOK)
	nodes := doc.Find(`[data-testid="node"]`)
	if nodes.Length() != 2 {
		t.Fatalf("%d nodes, want 2", nodes.Length())
	}
	gpu := doc.Find(`[data-testid="node"][data-node="gpu-1"]`)
	if got := gpu.Find(`[data-testid="node-ram"]`).Text(); got != "274.9 GB, 214.7 GB free" { // the nodes file's 256 and 200 GiB
		t.Errorf("RAM %q", got)
	}
	bars := texts(gpu.Find(`[data-testid="bar-text"]`))
	if len(bars) != 3 || bars[0] != "60.1 GB in use, 214.7 GB free of 274.9 GB" || bars[1] != "0 bytes in use, 25.8 GB free of 25.8 GB" {
		t.Errorf("memory bars %q: want the RAM and each of the two cards", bars)
	}
	if got := doc.Find(`[data-testid="replicas"]`).Text(); !strings.Contains(got, "No fleet is configured") {
		t.Errorf("replicas section %q", got)
	}
}

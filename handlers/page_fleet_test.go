package handlers_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"modelserve/catalog"
	"modelserve/handlers"
	"modelserve/internal/fleet"
	"modelserve/internal/mirror"
)

// The fleet itself is tested in internal/fleet and end to end; here a
// fleet held still shows what the pages and the API make of each state.

// fakeFleet is a fleet frozen in the states a test sets; EngineKey makes
// it a fleet that can name its engines' keys, as fleet.Fleet does.
type fakeFleet struct {
	replicas []fleet.Replica
	models   []fleet.ModelHealth
	nodes    []fleet.NodeStatus
	starts   []fleet.Start
	keys     map[string]string
}

var _ handlers.Fleet = (*fakeFleet)(nil)

func (f *fakeFleet) Replicas() []fleet.Replica        { return slices.Clone(f.replicas) }
func (f *fakeFleet) ModelHealth() []fleet.ModelHealth { return slices.Clone(f.models) }
func (f *fakeFleet) Nodes() []fleet.NodeStatus        { return slices.Clone(f.nodes) }
func (f *fakeFleet) EngineKey(id string) string       { return f.keys[id] }
func (f *fakeFleet) Starts(_ context.Context, limit int) ([]fleet.Start, error) {
	return slices.Clone(f.starts[:min(limit, len(f.starts))]), nil
}

const (
	engineKey = "5ecre7k3y0f7he3ng1ne5ecre7k3y0f7he3ng1ne"
	// gb is a decimal gigabyte, as the pages say sizes: a node of 32 * gb
	// reads "32 GB".
	gb = int64(1e9)
)

// busyFleet is one node, cpu-1 (as the pool names it too), running tiny
// (ready, measured) and small (loading, failed twice before), with broken
// parked and huge waiting for room. tiny's engine echoed its key and wrote
// a line of markup.
func busyFleet() *fakeFleet {
	started := time.Now().Add(-time.Minute)
	return &fakeFleet{
		replicas: []fleet.Replica{
			{ID: "small-1", Model: "small", Profile: "cpu", Node: "cpu-1", Endpoint: "http://127.0.0.1:4343", State: fleet.Loading,
				Failures: 2, LastError: "the engine ended before it was ready: out of memory", Started: started,
				PID: 4343, EstimateBytes: 4 * gb, Log: []string{"llama_model_load: loading"}},
			{ID: "tiny-1", Model: "tiny", Profile: "cpu", Node: "cpu-1", Endpoint: "http://127.0.0.1:4242", State: fleet.Ready,
				Started: started, ReadyAt: started.Add(3 * time.Second), PID: 4242, Threads: 4,
				RSSBytes: 3 * gb / 2, EstimateBytes: 2 * gb,
				Load: &fleet.Load{Size: catalog.SizeForSlots(4, 4096), SlotsBusy: 1, Deferred: 2, PromptTokens: 300, CachedTokens: 100, PredictedTokens: 50},
				Log: []string{
					"main: starting llama-server --api-key " + engineKey,
					"<script>alert(1)</script>",
					"main: server is listening on http://127.0.0.1:4242",
				}},
		},
		models: []fleet.ModelHealth{
			{Model: "broken", Class: "standard", Want: 1, Parked: true, Failures: 3, HardwareExists: true,
				Reason: "the engine ended before it was ready: unknown model architecture 'xyz'"},
			{Model: "huge", Class: "standard", Want: 1, Unplaceable: true, HardwareExists: true,
				Placement: "node cpu-1: needs 64 GB, 20 GB free; replica tiny-1 of tiny uses 2 GB\nnode gpu-1: needs 1 L4 card, 0 free"},
			{Model: "small", Class: "standard", Want: 1, HardwareExists: true},
			{Model: "tiny", Class: "standard", Want: 1, Ready: 1, HardwareExists: true},
		},
		nodes: []fleet.NodeStatus{{Name: "cpu-1", CPUCores: 8, RAMBytes: 32 * gb, AvailableBytes: 24 * gb,
			FreeBytes: 20 * gb, PromisedBytes: 6 * gb, Replicas: []string{"small-1", "tiny-1"}}},
		starts: []fleet.Start{
			{Replica: "tiny-1", Model: "tiny", File: "/data/mirror/acme/tiny/abc/tiny-Q4_K_M.gguf", Size: catalog.Size{Pool: 16384, Slots: 4},
				EstimateBytes: 2 * gb, RSSBytes: 3 * gb / 2, Started: started, ReadyAt: started.Add(3 * time.Second)},
			{Replica: "tiny-0", Model: "tiny", File: "/data/mirror/acme/tiny/abc/tiny-Q4_K_M.gguf", Size: catalog.Size{Pool: 4096, Slots: 1},
				EstimateBytes: gb, RSSBytes: 5 * gb / 4, Started: started, ReadyAt: started.Add(time.Second)},
		},
		keys: map[string]string{"tiny-1": engineKey, "small-1": "an0th3rk3y"},
	}
}

func TestFleetPageShowsTheFleet(t *testing.T) {
	e := newConsoleEnv(t, func(d *handlers.Deps) { d.Pool, d.Fleet = poolOf(t, twoNodes), busyFleet() })
	resp := e.signedIn().get("/fleet")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("fleet page: %s", resp.Status)
	}
	raw := body(t, resp)
	if strings.Contains(raw, engineKey) {
		t.Fatal("the page shows an engine's key")
	}
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("nodes", func(t *testing.T) {
		cpu := doc.Find(`[data-testid="node"][data-node="cpu-1"]`)
		if got := cpu.Find(`[data-testid="node-ram"]`).Text(); got != "32 GB, 20 GB free" {
			t.Errorf("cpu-1's RAM reads %q: want what the fleet has free", got)
		}
		if got := cpu.Find(`[data-testid="bar-text"]`).Text(); got != "small-1 4 GB estimated, tiny-1 1.5 GB measured, "+
			"6.5 GB other programs and room held for replicas loading; 20 GB free of 32 GB" {
			t.Errorf("cpu-1's memory reads %q", got)
		}
		var parts []string
		cpu.Find(`[data-testid="bar-part"]`).Each(func(_ int, s *goquery.Selection) { parts = append(parts, s.AttrOr("title", "")) })
		if want := []string{"small-1: 4 GB estimated", "tiny-1: 1.5 GB measured", "other: 6.5 GB", "free: 20 GB"}; !slices.Equal(parts, want) {
			t.Errorf("cpu-1's memory bar parts %q, want %q", parts, want)
		}
		// A node the fleet does not run keeps the pool's figures.
		if got := texts(doc.Find(`[data-node="gpu-1"] [data-testid="bar-text"]`)); len(got) == 0 || got[0] != "60.1 GB in use, 214.7 GB free of 274.9 GB" { // the nodes file's GiB
			t.Errorf("gpu-1's memory %q", got)
		}
	})

	t.Run("replicas", func(t *testing.T) {
		tiny := doc.Find(`[data-testid="replica"][data-replica="tiny-1"]`)
		for what, want := range map[string]string{
			`[data-testid="state"]`:          "✓ ready",
			`[data-testid="endpoint"]`:       "http://127.0.0.1:4242",
			`[data-testid="failures"]`:       "0",
			`[data-testid="replica-memory"]`: "1.5 GB resident; estimated 2 GB",
			// The engine's --threads, not a count of the process's threads.
			`[data-testid="replica-process"]`: "pid 4242, started with --threads 4",
			`[data-testid="replica-load"]`:    "1 of 4 slots busy, 2 waiting; 4096 tokens a slot; 400 prompt tokens read (25% from its cache), 50 generated",
			// The row's cells, each a figure; the sentences above are in
			// its details.
			`tr:first-child [data-testid="replica-mem"]`:                "1.5 GB",
			`tr:first-child [data-testid="replica-busy"]`:               "1/4 busy, 2 waiting",
			`tr:first-child [data-testid="replica-size"]`:               "4096 × 4",
			`[data-testid="replica-more"] [data-testid="replica-load"]`: "1 of 4 slots busy, 2 waiting; 4096 tokens a slot; 400 prompt tokens read (25% from its cache), 50 generated",
		} {
			if got := strings.Join(texts(tiny.Find(what)), " "); got != want {
				t.Errorf("tiny-1's %s reads %q, want %q", what, got, want)
			}
		}
		small := doc.Find(`[data-testid="replica"][data-replica="small-1"]`)
		if got := texts(small.Find(`[data-testid="state"]`)); len(got) != 1 || got[0] != "◐ loading" {
			t.Errorf("small-1's state %q", got)
		}
		if got := texts(small.Find(`[data-testid="failures"]`)); len(got) != 1 || got[0] != "2" {
			t.Errorf("small-1's failures %q", got)
		}
		if got := small.Find(`[data-testid="replica-more"] [data-testid="last-error"]`).Text(); !strings.HasPrefix(got, "the engine ended before it was ready") {
			t.Errorf("small-1's last failure in its details reads %q", got)
		}
	})

	t.Run("log is text", func(t *testing.T) {
		// The page shows the last line; the lines before it are on a page
		// of their own, on demand.
		if got := doc.Find(`[data-replica="tiny-1"] [data-testid="log-last"]`).Text(); got != "main: server is listening on http://127.0.0.1:4242" {
			t.Errorf("tiny-1's last line reads %q", got)
		}
		link := doc.Find(`[data-replica="tiny-1"] a[data-testid="log-link"]`)
		if href := link.AttrOr("href", ""); href != "/fleet/replicas/tiny-1/log" || link.Text() != "The last 3 lines" {
			t.Fatalf("tiny-1's log link: %q %q", href, link.Text())
		}
		resp := e.signedIn().get("/fleet/replicas/tiny-1/log")
		raw := body(t, resp)
		if resp.StatusCode != http.StatusOK || strings.Contains(raw, engineKey) {
			t.Fatalf("log page: %s, with the key: %v", resp.Status, strings.Contains(raw, engineKey))
		}
		page, err := goquery.NewDocumentFromReader(strings.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		if page.Find("main script").Length() != 0 || doc.Find("main script").Length() != 0 {
			t.Error("a line of the engine's log became a <script> element")
		}
		got := page.Find(`[data-testid="log-text"]`).Text()
		for _, want := range []string{"<script>alert(1)</script>", "--api-key [engine key]", "server is listening"} {
			if !strings.Contains(got, want) {
				t.Errorf("the log does not show %q as text:\n%s", want, got)
			}
		}
	})

	t.Run("models", func(t *testing.T) {
		broken := doc.Find(`[data-testid="model-health"][data-model="broken"]`)
		if got := broken.Find(`[data-testid="state"]`).Text(); got != "✗ parked" {
			t.Errorf("broken's state %q", got)
		}
		if got := broken.Find(`[data-testid="reason"]`).Text(); got != "the engine ended before it was ready: unknown model architecture 'xyz'" {
			t.Errorf("broken's reason %q", got)
		}
		huge := doc.Find(`[data-testid="model-health"][data-model="huge"]`)
		if got := huge.Find(`[data-testid="state"]`).Text(); got != "◐ waiting for room" {
			t.Errorf("huge's state %q", got)
		}
		if got := texts(huge.Find(`[data-testid="placement"] li`)); len(got) != 2 || got[0] != "node cpu-1: needs 64 GB, 20 GB free; replica tiny-1 of tiny uses 2 GB" {
			t.Errorf("huge's placement %q, want one line a node", got)
		}
		if got := doc.Find(`[data-testid="model-health"][data-model="tiny"] [data-testid="model-replicas"]`).Text(); got != "1 of 1 ready" {
			t.Errorf("tiny's replicas %q", got)
		}
	})

	t.Run("memory estimated and measured", func(t *testing.T) {
		var rows [][]string
		doc.Find(`[data-testid="start"]`).Each(func(_ int, s *goquery.Selection) {
			// The context as a figure, its sentence in the figure's title.
			size := s.Find("td").Eq(2)
			rows = append(rows, []string{s.AttrOr("data-replica", ""), size.Text(), size.Find("abbr").AttrOr("title", ""),
				s.Find(`[data-testid="start-estimate"]`).Text(), s.Find(`[data-testid="start-measured"]`).Text(), s.Find(`[data-testid="start-error"]`).Text()})
		})
		want := [][]string{
			{"tiny-1", "4096 × 4", "16384 tokens in 4 slots of 4096", "2 GB", "1.5 GB", "measured 25% under"},
			{"tiny-0", "4096 × 1", "4096 tokens in one slot", "1 GB", "1.3 GB", "measured 25% over"},
		}
		if !slices.EqualFunc(rows, want, slices.Equal) {
			t.Errorf("the starts read %q, want %q", rows, want)
		}
	})

	if doc.Find(`[data-testid="replicas"] .placeholder`).Length() != 0 {
		t.Error("the page still says there is no fleet")
	}
}

func TestFleetPageWithNothingRunning(t *testing.T) {
	e := newConsoleEnv(t, func(d *handlers.Deps) {
		d.Fleet = &fakeFleet{nodes: []fleet.NodeStatus{{Name: "solo", CPUCores: 4, RAMBytes: 16 * gb, FreeBytes: 12 * gb}}}
	})
	doc := mustStatus(t, e.signedIn().get("/fleet"), http.StatusOK)
	// No pool, but the fleet's own node.
	if got := doc.Find(`[data-node="solo"] [data-testid="bar-text"]`).Text(); got != "no replicas, 4 GB other programs and room held for replicas loading; 12 GB free of 16 GB" {
		t.Errorf("solo's memory %q", got)
	}
	if doc.Find(`[data-testid="no-replicas"]`).Length() != 1 || doc.Find(`[data-testid="no-models"]`).Length() != 1 {
		t.Error("an idle fleet does not say that nothing runs")
	}
}

func TestCatalogRunningColumn(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		fleet handlers.Fleet
		want  map[string]string
	}{
		{"without a fleet", nil, map[string]string{
			"tiny": "running — (no fleet yet)", "broken": "running — (no fleet yet)",
		}},
		{"with a fleet", busyFleet(), map[string]string{
			"tiny":   "1 of 1 ready",
			"small":  "0 of 1 ready, starting",
			"broken": "parked: the engine ended before it was ready: unknown model architecture 'xyz'",
			"huge":   "0 of 1 ready, waiting for room",
			"fresh":  "not looked at by the fleet yet",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newConsoleEnv(t, func(d *handlers.Deps) { d.Fleet = tc.fleet })
			for name := range tc.want {
				if err := e.catalog.Add(ctx, tinyModel(name), "test"); err != nil {
					t.Fatal(err)
				}
			}
			doc := mustStatus(t, e.signedIn().get("/catalog"), http.StatusOK)
			for name, want := range tc.want {
				if got := doc.Find(`[data-model="` + name + `"] [data-testid="running"]`).Text(); got != want {
					t.Errorf("%s: running reads %q, want %q", name, got, want)
				}
			}
		})
	}
}

// TestMirrorRemoveRefusesAFileInUse: a file an engine reads from cannot be
// removed from under it; once nothing runs from it, it can.
func TestMirrorRemoveRefusesAFileInUse(t *testing.T) {
	ff := &fakeFleet{replicas: []fleet.Replica{{ID: "tiny-1", Model: "tiny", Node: "local", State: fleet.Ready}}}
	e := newConsoleEnv(t, func(d *handlers.Deps) { d.Fleet = ff })
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "model-Q4_K_M.gguf")
	content := []byte("GGUF: bytes an engine is reading")
	if err := os.WriteFile(src, content, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	paths, err := e.mirror.Fetch(ctx, []mirror.File{{Model: "tiny", Revision: "c0ffee0", Path: "model-Q4_K_M.gguf",
		URL: "file://" + src, Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:])}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := catalog.Model{Name: "tiny", Source: paths[0], ContextLength: 2048,
		Profiles: []catalog.Profile{{Name: "cpu", Engine: "llamacpp"}}, Scaling: catalog.Scaling{Min: 1, Max: 1}}
	if err := e.catalog.Add(ctx, m, "test"); err != nil {
		t.Fatal(err)
	}
	b := e.signedIn()
	remove := url.Values{"model": {"tiny"}, "revision": {"c0ffee0"}, "path": {"model-Q4_K_M.gguf"}, "confirm": {"yes"}}
	doc := mustStatus(t, b.post("/mirror", remove), http.StatusConflict)
	if got := doc.Find(`[role="alert"]`).Text(); !strings.Contains(got, "model-Q4_K_M.gguf") {
		t.Errorf("removing a file in use says %q", got)
	}
	if _, err := os.Stat(paths[0]); err != nil {
		t.Fatalf("the file in use was removed: %v", err)
	}

	ff.replicas[0].State = fleet.Stopped
	resp := b.post("/mirror", remove)
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("removing a file nothing runs from: %s", resp.Status)
	}
	if _, err := os.Stat(paths[0]); !os.IsNotExist(err) {
		t.Errorf("the file is still there: %v", err)
	}
}

// TestFleetBarSaysWhatIsKeptFree: the memory a node keeps free for the
// system (--headroom) is its own part of the bar, and said in words.
func TestFleetBarSaysWhatIsKeptFree(t *testing.T) {
	e := newConsoleEnv(t, func(d *handlers.Deps) {
		d.Fleet = &fakeFleet{nodes: []fleet.NodeStatus{{Name: "solo", CPUCores: 4, RAMBytes: 16 * gb, FreeBytes: 11 * gb, HeadroomBytes: gb}}}
	})
	doc := mustStatus(t, e.signedIn().get("/fleet"), http.StatusOK)
	if got := doc.Find(`[data-node="solo"] [data-testid="bar-text"]`).Text(); got != "no replicas, 4 GB other programs and room held for replicas loading; 11 GB free of 16 GB, 1 GB kept free for the system" {
		t.Errorf("solo's memory %q", got)
	}
	var parts []string
	doc.Find(`[data-node="solo"] [data-testid="bar-part"]`).Each(func(_ int, s *goquery.Selection) { parts = append(parts, s.AttrOr("title", "")) })
	if want := []string{"other: 4 GB", "kept free: 1 GB", "free: 11 GB"}; !slices.Equal(parts, want) {
		t.Errorf("solo's bar parts %q, want %q", parts, want)
	}
}

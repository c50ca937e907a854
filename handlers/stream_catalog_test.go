package handlers_test

import (
	"context"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"modelserve/catalog"
	"modelserve/handlers"
	"modelserve/internal/fleet"
)

// TestCatalogStreamRedraws: the catalog page's stream sends its table at
// once, and again when a model is added, with the replicas the fleet runs
// of it.
func TestCatalogStreamRedraws(t *testing.T) {
	// The fleet has looked at tiny already; the catalog gets it after
	// the stream's first look, which reads it again within seconds.
	ff := &fakeFleet{models: []fleet.ModelHealth{{Model: "tiny", Class: "standard", Want: 1, Ready: 1}}}
	e := newConsoleEnv(t, func(d *handlers.Deps) { d.Fleet = ff })
	b := e.signedIn()
	if doc := mustStatus(t, b.get("/catalog"), 200); doc.Find(`[sse-connect="/catalog/stream"] [sse-swap="models"]`).Length() != 1 {
		t.Fatal("the catalog page does not follow its stream")
	}
	resp := b.get("/catalog/stream")
	defer resp.Body.Close()
	events := readEvents(t, resp.Body)
	if first := nextEvent(t, events); first.name != "models" || !strings.Contains(first.data, `data-testid="empty"`) {
		t.Fatalf("first event %q: %.200s", first.name, first.data)
	}
	m := catalog.Model{Name: "tiny", ContextLength: 2048, Profiles: []catalog.Profile{{Name: "cpu", Engine: "llamacpp"}}, Scaling: catalog.Scaling{Min: 1, Max: 1}}
	if err := e.catalog.Add(context.Background(), m, "test"); err != nil {
		t.Fatal(err)
	}
	for {
		ev := nextEvent(t, events)
		doc, _ := goquery.NewDocumentFromReader(strings.NewReader(ev.data))
		if got := doc.Find(`[data-testid="model-row"][data-model="tiny"] [data-testid="running"]`).Text(); got == "1 of 1 ready" {
			break
		}
	}
}

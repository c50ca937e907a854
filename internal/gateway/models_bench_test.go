package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/auth"
	"modelserve/internal/fleet"
	"modelserve/internal/testkit"
)

// healthFleet reports a health for each of its models and one ready
// replica of every other one, as a fleet running them does; it serves no
// request.
type healthFleet struct {
	health []fleet.ModelHealth
	ready  map[string][]fleet.Replica
}

func (f *healthFleet) Serving(model string) []fleet.Replica        { return f.ready[model] }
func (f *healthFleet) Hold(string, time.Time) (func(), bool)       { return func() {}, true }
func (f *healthFleet) EngineKey(string) string                     { return "k" }
func (f *healthFleet) ModelHealth() []fleet.ModelHealth            { return f.health }
func (f *healthFleet) Use(string, int, time.Time) (release func()) { return func() {} }

// BenchmarkListModels is GET /v1/models with 500 models (each with an
// alias) in a real SQLite catalog, a fleet reporting every one, and a real
// token, over loopback HTTP, beside the same at 20 (x-of-20). The target
// is under 20 ms: OpenAI's clients read the whole list, so it is not paged.
func BenchmarkListModels(b *testing.B) {
	var at20 float64
	for _, n := range []int{20, 500} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			db := testkit.OpenDB(b)
			store := catalog.NewStore(db)
			f := &healthFleet{ready: map[string][]fleet.Replica{}}
			for i := range n {
				name := fmt.Sprintf("model-%03d", i)
				m := catalog.Model{Name: name, Aliases: []string{name + "-chat"}, ContextLength: 4096,
					Profiles: []catalog.Profile{{Name: "cpu", Engine: "llamacpp"}}, Scaling: catalog.Scaling{Min: i % 2, Max: 2}}
				if err := store.Add(context.Background(), m, "bench"); err != nil {
					b.Fatal(err)
				}
				f.health = append(f.health, fleet.ModelHealth{Model: name, Want: 1, Ready: i % 2})
				if i%2 == 1 {
					f.ready[name] = []fleet.Replica{{ID: name + "-0", Model: name, State: fleet.Ready}}
				}
			}
			tokens := auth.NewTokens(db)
			tok, err := tokens.Create(context.Background(), "bench")
			if err != nil {
				b.Fatal(err)
			}
			g, err := New(Options{Catalog: store, Fleet: f, Tokens: tokens})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(g.Close)
			srv := httptest.NewServer(http.HandlerFunc(g.ListModels))
			b.Cleanup(srv.Close)
			ms := testkit.MsToFirstByte(b, func() *http.Response {
				return testkit.BearerGet(b, srv.URL+"/v1/models", tok)
			})
			if n == 20 {
				at20 = ms
				return
			}
			if at20 > 0 {
				b.ReportMetric(ms/at20, "x-of-20")
			}
			if ms > 20 {
				b.Errorf("/v1/models took %.1f ms to its first byte with %d models; the target is under 20 ms", ms, n)
			}
		})
	}
}

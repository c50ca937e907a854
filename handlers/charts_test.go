package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"modelserve/handlers"
	"modelserve/internal/auth"
	"modelserve/internal/rollup"
	"modelserve/internal/words"
)

// fakeRollups answers a set hour.
type fakeRollups struct{ h rollup.Hour }

func (f fakeRollups) Hour() rollup.Hour { return f.h }

// chartsHour is an hour in which tiny served 4 then 6 requests, and is
// serving its minute in progress; small served none; node cpu-1 had its
// memory.
func chartsHour() rollup.Hour {
	end := time.Date(2026, 3, 4, 11, 2, 30, 0, time.UTC)
	start := end.Truncate(time.Minute).Add(-time.Hour)
	at := func(m int) time.Time { return start.Add(time.Duration(m) * time.Minute) }
	return rollup.Hour{Start: start, End: end,
		Models: map[string][]rollup.ModelMinute{
			"tiny": {
				{Minute: at(58), Requests: 4, P50Ms: 250, TokensPerSecond: 30},
				{Minute: at(59), Requests: 6, P50Ms: 1500, TokensPerSecond: 12.5},
				{Minute: at(60), Requests: 1, P50Ms: 300, TokensPerSecond: 20, Partial: true},
			},
			"small": {{Minute: at(59)}, {Minute: at(60), Partial: true}},
		},
		Nodes: map[string][]rollup.NodeMinute{
			"cpu-1": {{Minute: at(59), PromisedBytes: 6 * gb, MeasuredBytes: 3 * gb / 2, FreeBytes: 20 * gb},
				{Minute: at(60), PromisedBytes: 6 * gb, MeasuredBytes: 2 * gb, FreeBytes: 20 * gb, Partial: true}},
		},
	}
}

func TestAPISeries(t *testing.T) {
	e := newConsoleEnv(t, func(d *handlers.Deps) { d.Fleet, d.Rollups = busyFleet(), fakeRollups{chartsHour()} })
	for _, n := range []string{"tiny", "small"} {
		if err := e.catalog.Add(context.Background(), tinyModel(n), "test"); err != nil {
			t.Fatal(err)
		}
	}
	var model struct {
		Model   string `json:"model"`
		Minutes []struct {
			Minute          time.Time `json:"minute"`
			Requests        int       `json:"requests"`
			P50Ms           float64   `json:"p50_ms"`
			TokensPerSecond float64   `json:"tokens_per_second"`
			Partial         bool      `json:"partial"`
		} `json:"minutes"`
	}
	tok, err := auth.NewTokens(e.db).Create(context.Background(), "charts")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(apiGetWith(t, e, tok, "/api/v1/catalog/tiny/series", http.StatusOK)), &model); err != nil {
		t.Fatal(err)
	}
	var requests []int
	for _, m := range model.Minutes {
		requests = append(requests, m.Requests)
	}
	if model.Model != "tiny" || !reflect.DeepEqual(requests, []int{4, 6, 1}) || model.Minutes[1].P50Ms != 1500 || !model.Minutes[2].Partial {
		t.Errorf("tiny's series = %+v, want the minutes of 4, 6 and 1 requests so far", model)
	}
	var node struct {
		Node    string `json:"node"`
		Minutes []struct {
			PromisedBytes int64 `json:"promised_bytes"`
			MeasuredBytes int64 `json:"measured_bytes"`
			FreeBytes     int64 `json:"free_bytes"`
		} `json:"minutes"`
	}
	if err := json.Unmarshal([]byte(apiGetWith(t, e, tok, "/api/v1/nodes/cpu-1/series", http.StatusOK)), &node); err != nil {
		t.Fatal(err)
	}
	if node.Node != "cpu-1" || len(node.Minutes) != 2 || node.Minutes[1].MeasuredBytes != 2*gb {
		t.Errorf("cpu-1's series = %+v, want two minutes, 2 GiB measured now", node)
	}
	for _, path := range []string{"/api/v1/catalog/nope/series", "/api/v1/nodes/nope/series"} {
		apiGetWith(t, e, tok, path, http.StatusNotFound)
	}
}

func TestCatalogAndFleetDrawTheHour(t *testing.T) {
	e := newConsoleEnv(t, func(d *handlers.Deps) {
		d.Fleet, d.Rollups, d.Gateway = busyFleet(), fakeRollups{chartsHour()}, &fakeGateway{}
	})
	for _, n := range []string{"tiny", "small"} {
		if err := e.catalog.Add(context.Background(), tinyModel(n), "test"); err != nil {
			t.Fatal(err)
		}
	}
	b := e.signedIn()
	doc := mustStatus(t, b.get("/catalog"), http.StatusOK)
	tiny := doc.Find(`[data-testid="model-row"][data-model="tiny"]`)
	var values []string
	tiny.Find(`[data-chart="chart-requests-tiny"] circle`).Each(func(_ int, s *goquery.Selection) { values = append(values, s.AttrOr("data-value", "")) })
	if !reflect.DeepEqual(values, []string{"4", "6", "1"}) {
		t.Errorf("tiny's requests chart draws %q, want 4, 6 and 1", values)
	}
	if got := texts(tiny.Find(`[data-testid="chart-latest"]`)); !reflect.DeepEqual(got, []string{"1 request/min", "p50 300 ms", "20 tokens/s"}) {
		t.Errorf("tiny's charts say %q", got)
	}
	if got := tiny.Find(`[data-chart="chart-requests-tiny"] svg title`).First().Text(); got != "requests a minute of tiny" {
		t.Errorf("the chart's title is %q", got)
	}
	if got := doc.Find(`[data-model="small"] [data-testid="charts-empty"]`).Text(); got != "no requests in the last hour" {
		t.Errorf("small, with no requests, shows %q", got)
	}

	fleetDoc := mustStatus(t, b.get("/fleet"), http.StatusOK)
	node := fleetDoc.Find(`[data-testid="node"][data-node="cpu-1"] [data-chart="chart-memory-cpu-1"]`)
	if got := node.Find(`[data-series="measured"] circle`).Last().AttrOr("data-value", ""); got != "2000000000" {
		t.Errorf("cpu-1's measured memory now is drawn as %q, want 2 GB", got)
	}
	if got, want := node.Find(`[data-testid="chart-latest"]`).Text(), words.Size(6*gb)+" promised, "+words.Size(2*gb)+" measured, "+words.Size(20*gb)+" free"; got != want {
		t.Errorf("cpu-1's memory chart says %q, want %q", got, want)
	}
	if fleetDoc.Find(`[data-model="tiny"] [data-chart="chart-speed-tiny"]`).Length() != 1 {
		t.Error("the fleet page's tiny has no tokens/s chart")
	}
}

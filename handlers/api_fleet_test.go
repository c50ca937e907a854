package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"modelserve/handlers"
	"modelserve/internal/auth"
	"modelserve/internal/fleet"
)

func TestAPIReplicas(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fleet    handlers.Fleet
		replicas int
		models   int
	}{
		{"without a fleet", nil, 0, 0},
		{"with a fleet", busyFleet(), 2, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newConsoleEnv(t, func(d *handlers.Deps) { d.Fleet = tc.fleet })
			raw := apiGet(t, e, "/api/v1/replicas")
			if strings.Contains(raw, engineKey) || strings.Contains(raw, "an0th3rk3y") {
				t.Fatal("the API shows an engine's key")
			}
			var out struct {
				Replicas []map[string]any `json:"replicas"`
				Models   []map[string]any `json:"models"`
			}
			if err := json.Unmarshal([]byte(raw), &out); err != nil {
				t.Fatalf("%v\n%s", err, raw)
			}
			if out.Replicas == nil || out.Models == nil || len(out.Replicas) != tc.replicas || len(out.Models) != tc.models {
				t.Fatalf("%d replicas and %d models, want lists of %d and %d:\n%s", len(out.Replicas), len(out.Models), tc.replicas, tc.models, raw)
			}
			if tc.replicas == 0 {
				return
			}
			tiny := out.Replicas[1]
			for _, field := range []string{"id", "model", "node", "endpoint", "state", "failures", "started", "log", "rss_bytes", "estimate_bytes"} {
				if _, ok := tiny[field]; !ok {
					t.Errorf("a replica has no %q: %v", field, tiny)
				}
			}
			if tiny["id"] != "tiny-1" || tiny["state"] != "ready" || tiny["rss_bytes"] != float64(3*gb/2) || tiny["estimate_bytes"] != float64(2*gb) {
				t.Errorf("tiny-1 %v", tiny)
			}
			for field := range tiny {
				if strings.Contains(field, "key") {
					t.Errorf("a replica has a field %q", field)
				}
			}
			if log := tiny["log"].([]any); len(log) != 3 || log[0] != "main: starting llama-server --api-key [engine key]" {
				t.Errorf("tiny-1's log %q", log)
			}
			broken, huge := out.Models[0], out.Models[1]
			if broken["parked"] != true || !strings.Contains(broken["reason"].(string), "unknown model architecture") {
				t.Errorf("broken %v: want parked with its reason", broken)
			}
			if huge["unplaceable"] != true || !strings.HasPrefix(huge["placement"].(string), "node cpu-1: needs 64 GB") {
				t.Errorf("huge %v: want unplaceable with its placement", huge)
			}
		})
	}
}

func TestAPINodesWithTheFleet(t *testing.T) {
	e := newConsoleEnv(t, func(d *handlers.Deps) { d.Pool, d.Fleet = poolOf(t, twoNodes), busyFleet() })
	var out struct {
		Nodes []struct {
			Name string `json:"name"`
		} `json:"nodes"`
		Fleet []struct {
			Name          string   `json:"name"`
			FreeBytes     int64    `json:"free_bytes"`
			PromisedBytes int64    `json:"promised_bytes"`
			Replicas      []string `json:"replicas"`
		} `json:"fleet"`
	}
	raw := apiGet(t, e, "/api/v1/nodes")
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Nodes) != 2 || len(out.Fleet) != 1 {
		t.Fatalf("want the pool's 2 nodes beside the fleet's 1:\n%s", raw)
	}
	if f := out.Fleet[0]; f.Name != "cpu-1" || f.FreeBytes != 20*gb || f.PromisedBytes != 6*gb || len(f.Replicas) != 2 {
		t.Errorf("the fleet's node %+v", f)
	}
}

// apiGet is a GET of the API with a fresh token; it fails the test unless
// the answer is 200.
func apiGet(t *testing.T, e *consoleEnv, path string) string {
	t.Helper()
	tok, err := auth.NewTokens(e.db).Create(context.Background(), "ci")
	if err != nil {
		t.Fatal(err)
	}
	return apiGetWith(t, e, tok, path, http.StatusOK)
}

// apiGetWith is a GET of the API with the token tok; it fails the test
// unless the answer's status is want.
func apiGetWith(t *testing.T, e *consoleEnv, tok, path string, want int) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %s, want %d\n%s", path, resp.Status, want, b)
	}
	return string(b)
}

// TestAPIReplicasPages: the replicas are paged by model as the catalog
// is: pages of limit models, each with its health and its replicas (a
// removed model's replica still draining counts as a model), followed by
// next, give every replica and every model once, in order; the engine
// starts come with the first page.
func TestAPIReplicasPages(t *testing.T) {
	f, pool := benchFleet(t, 4*30) // model-000 … model-029, four replicas each
	f.replicas = append(f.replicas, fleet.Replica{ID: "zz-gone-1", Model: "zz-gone", State: fleet.Draining})
	f.starts = []fleet.Start{{Replica: "model-000-0", Model: "model-000"}}
	e := newConsoleEnv(t, func(d *handlers.Deps) { d.Fleet, d.Pool = f, pool })
	type page struct {
		Replicas []fleet.Replica     `json:"replicas"`
		Models   []fleet.ModelHealth `json:"models"`
		Starts   []fleet.Start       `json:"starts"`
		Limit    int                 `json:"limit"`
		Next     string              `json:"next"`
	}
	tok, err := auth.NewTokens(e.db).Create(context.Background(), "ci")
	if err != nil {
		t.Fatal(err)
	}
	var replicas, models []string
	pages := 0
	for path := "/api/v1/replicas?limit=7"; path != ""; pages++ {
		if pages > 10 {
			t.Fatalf("more than 10 pages of 7 models for 31: the last next was %s", path)
		}
		var p page
		if err := json.Unmarshal([]byte(apiGetWith(t, e, tok, path, http.StatusOK)), &p); err != nil {
			t.Fatal(err)
		}
		named := map[string]bool{}
		for _, r := range p.Replicas {
			replicas, named[r.Model] = append(replicas, r.ID), true
		}
		for _, h := range p.Models {
			models, named[h.Model] = append(models, h.Model), true
		}
		if len(named) > 7 || p.Limit != 7 {
			t.Errorf("%s holds %d models (limit %d); want at most 7", path, len(named), p.Limit)
		}
		if (pages == 0) != (len(p.Starts) == 1) {
			t.Errorf("%s has %d starts; want the starts on the first page alone", path, len(p.Starts))
		}
		path = p.Next
	}
	var wantReplicas, wantModels []string
	for m := range 30 {
		wantModels = append(wantModels, fmt.Sprintf("model-%03d", m))
		for i := range 4 {
			wantReplicas = append(wantReplicas, fmt.Sprintf("model-%03d-%d", m, i))
		}
	}
	wantReplicas = append(wantReplicas, "zz-gone-1")
	if pages != 5 || !slices.Equal(replicas, wantReplicas) || !slices.Equal(models, wantModels) {
		t.Errorf("%d pages gave %d replicas and %d models; want 5 pages, the 121 replicas and 30 models once each, in order:\n%v\n%v",
			pages, len(replicas), len(models), replicas, models)
	}
}

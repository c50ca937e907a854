package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"modelserve/catalog"
)

func TestAPIControls(t *testing.T) {
	e, c := controlledEnv(t)
	api := newAPIClient(t, e)
	for _, tt := range []struct {
		name, path string
		body       any
		status     int
		want       string // in the body
		call       string
	}{
		{"stop", "/api/v1/replicas/tiny-1/stop", nil, http.StatusAccepted, `"id":"tiny-1"`, "stop tiny-1"},
		{"restart", "/api/v1/replicas/small-1/restart", nil, http.StatusAccepted, `"id":"small-1"`, "restart small-1"},
		{"no such replica", "/api/v1/replicas/nope-1/stop", nil, http.StatusNotFound, `the fleet has no replica named \"nope-1\"`, ""},
		{"scale", "/api/v1/catalog/tiny/scale", map[string]int{"min": 0, "max": 3}, http.StatusOK, `"scaling":{"min":0,"max":3}`, ""},
		{"scale with an idle time", "/api/v1/catalog/tiny/scale", map[string]any{"min": 0, "max": 3, "idle_after": "30s"}, http.StatusOK, `"scaling":{"min":0,"max":3,"idle_after":"30s"}`, ""},
		{"scale keeps the idle time", "/api/v1/catalog/tiny/scale", map[string]int{"min": 0, "max": 3}, http.StatusOK, `"scaling":{"min":0,"max":3,"idle_after":"30s"}`, ""},
		{"scale idle time not a duration", "/api/v1/catalog/tiny/scale", map[string]any{"min": 0, "max": 3, "idle_after": "soon"}, http.StatusBadRequest, `idle_after is a duration from 1s to 168h (a week), such as 30s or 15m, or 0 for the default of 15m, not \"soon\"`, ""},
		{"scale idle time too long", "/api/v1/catalog/tiny/scale", map[string]any{"min": 0, "max": 3, "idle_after": "200h"}, http.StatusBadRequest, "from 1s to 168h", ""},
		{"scale idle time too short", "/api/v1/catalog/tiny/scale", map[string]any{"min": 0, "max": 3, "idle_after": "100ms"}, http.StatusBadRequest, "from 1s to 168h", ""},
		{"scale idle time as a number", "/api/v1/catalog/tiny/scale", map[string]any{"min": 0, "max": 3, "idle_after": 30}, http.StatusBadRequest, "idle_after", ""},
		{"scale idle time with bounds refused", "/api/v1/catalog/tiny/scale", map[string]any{"min": 2, "max": 1, "idle_after": "1m"}, http.StatusBadRequest, "fewer than the 2 it keeps", ""},
		{"scale without max", "/api/v1/catalog/tiny/scale", map[string]int{"min": 1}, http.StatusBadRequest, "scaling needs both bounds", ""},
		{"scale below min", "/api/v1/catalog/tiny/scale", map[string]int{"min": 2, "max": 1}, http.StatusBadRequest, "fewer than the 2 it keeps", ""},
		{"scale too far", "/api/v1/catalog/tiny/scale", map[string]int{"min": 1, "max": 1000}, http.StatusBadRequest, "at most 64", ""},
		{"scale no model", "/api/v1/catalog/nope/scale", map[string]int{"min": 1, "max": 1}, http.StatusNotFound, "the catalog has no model named", ""},
		{"unpark", "/api/v1/catalog/broken/unpark", nil, http.StatusOK, `"model":"broken"`, "unpark broken"},
		{"unpark a running model", "/api/v1/catalog/tiny/unpark", nil, http.StatusConflict, "tiny is not parked", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, b := api.do(http.MethodPost, tt.path, tt.body)
			if resp.StatusCode != tt.status || !strings.Contains(string(b), tt.want) {
				t.Errorf("%s: %s %s; want %d with %q", tt.path, resp.Status, b, tt.status, tt.want)
			}
			if resp.StatusCode >= 400 {
				var e struct{ Error string }
				if json.Unmarshal(b, &e) != nil || e.Error == "" {
					t.Errorf("the refusal is not {\"error\": sentence}: %s", b)
				}
			}
			if tt.call != "" && !slices.Contains(c.calls(), tt.call) {
				t.Errorf("the fleet was not asked to %s: %q", tt.call, c.calls())
			}
		})
	}
	if m, _ := e.catalog.Get(context.Background(), "tiny"); m.Scaling != (catalog.Scaling{Min: 0, Max: 3, IdleAfter: 30 * time.Second}) {
		t.Errorf("after the refused scalings tiny scales %+v, want 0 to 3, idle after 30s", m.Scaling)
	}
}

package handlers_test

import (
	"encoding/json"
	"strings"
	"testing"

	"modelserve/internal/updates"
)

// TestUpdatesAPI: the check, the status and interval of a model, and the
// updates, as the README documents them.
func TestUpdatesAPI(t *testing.T) {
	e := newConsoleEnv(t)
	servedFromBranch(t, e, "tiny")
	pinned(t, e, "fixed")
	c := newAPIClient(t, e)

	var res updates.Result
	resp, b := c.do("POST", "/api/v1/catalog/tiny/check", nil)
	if err := json.Unmarshal(b, &res); resp.StatusCode != 200 || err != nil || res.Result != "up_to_date" || res.Commit != servedCommit || res.Update != nil {
		t.Fatalf("check before the branch moved: %s %s", resp.Status, b)
	}
	moveBranch(e, "tiny")
	resp, b = c.do("POST", "/api/v1/catalog/tiny/check", nil)
	res = updates.Result{}
	if err := json.Unmarshal(b, &res); resp.StatusCode != 200 || err != nil || res.Result != "update_available" || !res.Recorded ||
		res.Commit != movedCommit || res.Update == nil || len(res.Update.Files) != 1 || res.Update.Files[0].NewBytes != 2_000_000 {
		t.Fatalf("check after the branch moved: %s %s", resp.Status, b)
	}
	if !strings.Contains(string(b), `"old_bytes":1000`) || !strings.Contains(string(b), `"new_sha256":"`+movedSHA+`"`) {
		t.Errorf("the answer's field names: %s", b)
	}

	for _, tc := range []struct {
		name, method, path string
		body               any
		status             int
		want               string
	}{
		{"an unknown model's check", "POST", "/api/v1/catalog/nothing/check", nil, 404, `"the catalog has no model named \"nothing\"`},
		{"a pinned model's check", "POST", "/api/v1/catalog/fixed/check", nil, 409, "fixed is pinned to the tag v1.0 and is never updated"},
		{"the updates", "GET", "/api/v1/updates", nil, 200, `"new_commit":"` + movedCommit + `"`},
		{"one model's updates", "GET", "/api/v1/updates?model=fixed", nil, 200, `"updates":[]`},
		{"an update", "GET", "/api/v1/updates/1", nil, 200, `"model":"tiny"`},
		{"an unknown update", "GET", "/api/v1/updates/7", nil, 404, "there is no update 7"},
		{"not an update's id", "GET", "/api/v1/updates/seven", nil, 404, "an update's id is a whole number"},
		{"a bad before", "GET", "/api/v1/updates?before=x", nil, 400, "before is an update's id"},
		{"paged by offset", "GET", "/api/v1/updates?offset=5", nil, 400, "not by offset"},
		{"a model's status", "GET", "/api/v1/catalog/tiny/updates", nil, 200, `"available":{"id":1`},
		{"a pinned model's status", "GET", "/api/v1/catalog/fixed/updates", nil, 200, `"watched":false,"not_watched":"fixed is pinned`},
		{"an unknown model's status", "GET", "/api/v1/catalog/nothing/updates", nil, 404, "the catalog has no model named"},
		{"an interval of its own", "PUT", "/api/v1/catalog/tiny/updates", map[string]any{"interval": "90m"}, 200, `"interval":"1h30m0s","interval_set":true`},
		{"never", "PUT", "/api/v1/catalog/tiny/updates", map[string]any{"interval": "0"}, 200, `"interval":"0s","interval_set":true`},
		{"back to the default", "PUT", "/api/v1/catalog/tiny/updates", map[string]any{"interval": nil}, 200, `"interval_set":false`},
		{"too often", "PUT", "/api/v1/catalog/tiny/updates", map[string]any{"interval": "5s"}, 400, "from 1m to 8760h"},
		{"not a duration", "PUT", "/api/v1/catalog/tiny/updates", map[string]any{"interval": "daily"}, 400, "a duration such as 6h"},
		{"a misspelt field", "PUT", "/api/v1/catalog/tiny/updates", map[string]any{"every": "1h"}, 400, "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := c.do(tc.method, tc.path, tc.body)
			if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.want) {
				t.Errorf("%s %s: %s %s\nwant %d with %s", tc.method, tc.path, resp.Status, b, tc.status, tc.want)
			}
			if tc.status >= 400 {
				var e struct{ Error string }
				if json.Unmarshal(b, &e) != nil || e.Error == "" {
					t.Errorf("the refusal is not {\"error\": sentence}: %s", b)
				}
			}
		})
	}

	// A full page says where the next one is.
	resp, b = c.do("GET", "/api/v1/updates?limit=1", nil)
	var page struct {
		Updates []updates.Update
		Next    string
	}
	if err := json.Unmarshal(b, &page); err != nil || len(page.Updates) != 1 || page.Next != "/api/v1/updates?before=1&limit=1" {
		t.Errorf("a full page: %s", b)
	}
}

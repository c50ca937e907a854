package handlers_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestAPIReplicaLog: a replica's engine log as JSON, its engine key taken
// out as the log page takes it out; a replica the fleet does not have is
// a 404 with a sentence.
func TestAPIReplicaLog(t *testing.T) {
	e, _ := controlledEnv(t)
	api := newAPIClient(t, e)

	resp, b := api.do(http.MethodGet, "/api/v1/replicas/tiny-1/log", nil)
	var got struct {
		ID, Model, State string
		Lines            []string
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &got) != nil {
		t.Fatalf("%s %s", resp.Status, b)
	}
	if got.ID != "tiny-1" || got.Model != "tiny" || got.State != "ready" || len(got.Lines) != 3 ||
		got.Lines[2] != "main: server is listening on http://127.0.0.1:4242" {
		t.Errorf("the log of tiny-1: %+v", got)
	}
	if strings.Contains(string(b), engineKey) {
		t.Errorf("the log shows the engine's key: %s", b)
	}

	resp, b = api.do(http.MethodGet, "/api/v1/replicas/nope-1/log", nil)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), `the fleet has no replica named \"nope-1\"`) {
		t.Errorf("a replica the fleet does not have: %s %s", resp.Status, b)
	}
}

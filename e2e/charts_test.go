//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// sumDrawn adds up the values of the dots a chart draws: its argument is
// the chart's selector.
const sumDrawn = `sel => [...document.querySelectorAll(sel + ' circle')].reduce((s, c) => s + Number(c.dataset.value), 0)`

// TestChartsDrawTheRequestsSent: requests sent through the gateway to a
// served model are what its requests chart draws on the catalog page, its
// minutes adding up to what was sent, and a request sent with the page open
// is drawn without a reload; its latency and tokens/s charts have a latest
// value; the fleet page draws the node's memory, the replica's measured
// memory in it.
func TestChartsDrawTheRequestsSent(t *testing.T) {
	e := setup(t)
	const repo = "acme/Charted-GGUF"
	e.hub.AddRepo(repo, hubtest.RepoOptions{})
	e.hub.AddFile(repo, "Charted-Q8_0.gguf", ggufgen.Bytes(ggufgen.Spec{ContextLength: 2048}))
	model := e.srv.serveModel(map[string]any{"repo": repo, "replicas": 1}).Model

	// What was counted before (the job's smoke test, if its meter had
	// started), then three requests through the gateway.
	before := e.srv.requestsCharted(model)
	const sent = 3
	for i := range sent {
		e.srv.chat(model, fmt.Sprintf("Count to %d.", i+1))
	}
	if got := e.srv.requestsCharted(model); got != before+sent {
		t.Fatalf("the series API counts %d requests of %s, want %d before and %d sent", got, model, before, sent)
	}

	tb := e.newTab(t)
	tb.open("/catalog")
	chart := `[data-testid=model-row][data-model=` + strconv.Quote(model) + `] [data-chart=` + strconv.Quote("chart-requests-"+model) + `]`
	drawn := func() int {
		v, err := tb.page.Evaluate(sumDrawn, chart)
		tb.must(err, "adding up the requests chart's points")
		return int(toFloat(v))
	}
	if got := drawn(); got != before+sent {
		t.Fatalf("the catalog's requests chart of %s draws %d requests, want the %d sent (and %d before)", model, got, sent, before)
	}
	// Live: one more, with the page open, is drawn by the page's stream.
	e.srv.chat(model, "Once more.")
	if err := poll(quick, func() bool { return drawn() == before+sent+1 }); err != nil {
		t.Errorf("the catalog's requests chart draws %d requests %s after one more was sent, want %d without a reload", drawn(), quick, before+sent+1)
	}
	row := tb.loc(`[data-testid=model-row][data-model=` + strconv.Quote(model) + `]`)
	// The charts are in the row's details, one click away.
	tb.must(row.Locator("[data-testid=model-more] > summary").Click(), "opening %s's details", model)
	latest, err := row.Locator(`[data-testid=chart-latest]`).AllInnerTexts()
	tb.must(err, "reading the charts' latest values")
	if len(latest) != 3 || !regexp.MustCompile(`^p50 \d+(\.\d)? (ms|s)$`).MatchString(latest[1]) || !regexp.MustCompile(`^\d+(\.\d)? tokens/s$`).MatchString(latest[2]) {
		t.Errorf("%s's charts say %q, want requests, a p50 and tokens/s", model, latest)
	}
	tb.screenshot("catalog-charts.png")

	// The fleet page: the node's memory, with the replica's measured.
	tb.open("/fleet")
	measured, err := tb.page.Evaluate(`() => [...document.querySelectorAll('[data-testid=node] [data-series=measured] circle')].map(c => Number(c.dataset.value)).pop() || 0`)
	tb.must(err, "reading the node's measured memory")
	if toFloat(measured) <= 0 {
		t.Errorf("the node's memory chart draws %v measured now, want the replica's resident memory", measured)
	}
	tb.screenshot("fleet-charts.png")
}

// requestsCharted adds up model's requests over the hour, as the series
// API answers them.
func (s *server) requestsCharted(model string) int {
	s.t.Helper()
	var series struct {
		Minutes []struct {
			Requests int `json:"requests"`
		} `json:"minutes"`
	}
	s.api("GET", "/api/v1/catalog/"+model+"/series", nil, &series)
	n := 0
	for _, m := range series.Minutes {
		n += m.Requests
	}
	return n
}

// chat sends one chat request to model through the gateway, as a client
// would, and waits for its answer.
func (s *server) chat(model, text string) {
	s.t.Helper()
	b, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 8, "temperature": 0,
		"messages": []map[string]string{{"role": "user", "content": text}}})
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Timeout: time.Minute}
	resp, err := c.Do(req)
	if err != nil {
		s.t.Fatalf("asking %s: %v", model, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("asking %s: %s %s", model, resp.Status, out)
	}
}

package metrics_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"modelserve/internal/fleet"
	"modelserve/internal/metrics"
)

// fakeFleet is a fleet whose replicas and nodes a test changes between
// scrapes.
type fakeFleet struct {
	mu       sync.Mutex
	replicas []fleet.Replica
	nodes    []fleet.NodeStatus
}

func (f *fakeFleet) Replicas() []fleet.Replica {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fleet.Replica(nil), f.replicas...)
}

func (f *fakeFleet) Nodes() []fleet.NodeStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fleet.NodeStatus(nil), f.nodes...)
}

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

// TestFleetGauges: a scrape shows the fleet as it is at that moment, and the
// next scrape shows it changed, with no one telling the metrics of it.
func TestFleetGauges(t *testing.T) {
	const gib = 1 << 30
	f := &fakeFleet{
		replicas: []fleet.Replica{
			{ID: "tiny-1", Model: "tiny", Node: "cpu-1", State: fleet.Ready, EstimateBytes: 2 * gib, RSSBytes: 3 * gib},
			{ID: "tiny-2", Model: "tiny", Node: "cpu-1", State: fleet.Loading, EstimateBytes: 2 * gib},
		},
		nodes: []fleet.NodeStatus{{Name: "cpu-1", RAMBytes: 32 * gib, FreeBytes: 20 * gib, PromisedBytes: 4 * gib}},
	}
	m := metrics.New(nil)
	m.WatchFleet(f)
	text := scrape(t, m)
	for _, want := range []string{
		`modelserve_replicas{model="tiny",state="ready"} 1`,
		`modelserve_replicas{model="tiny",state="loading"} 1`,
		`modelserve_replicas{model="tiny",state="failed"} 0`,
		`modelserve_node_memory_bytes{node="cpu-1"} 3.4359738368e+10`,
		`modelserve_node_memory_free_bytes{node="cpu-1"} 2.147483648e+10`,
		`modelserve_node_memory_promised_bytes{node="cpu-1"} 4.294967296e+09`,
		`modelserve_replica_memory_estimate_bytes{model="tiny",replica="tiny-1"} 2.147483648e+09`,
		`modelserve_replica_memory_resident_bytes{model="tiny",replica="tiny-1"} 3.221225472e+09`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}
	if strings.Contains(text, `modelserve_replica_memory_resident_bytes{model="tiny",replica="tiny-2"}`) {
		t.Error("a replica still loading shows a resident figure it has not measured")
	}

	f.mu.Lock()
	f.replicas = f.replicas[:1]
	f.replicas[0].State = fleet.Failed
	f.mu.Unlock()
	text = scrape(t, m)
	for _, want := range []string{
		`modelserve_replicas{model="tiny",state="ready"} 0`,
		`modelserve_replicas{model="tiny",state="failed"} 1`,
		`modelserve_replicas{model="tiny",state="loading"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("after the change, the scrape lacks %s", want)
		}
	}
	if strings.Contains(text, `replica="tiny-2"`) {
		t.Error("a replica gone is still in the scrape")
	}
}

// TestStepLabelsHaveNoSpaces: the smoke test step is smoke_test in PromQL.
func TestStepLabelsHaveNoSpaces(t *testing.T) {
	m := metrics.New(nil)
	m.StepDone("smoke test", time.Second)
	m.StepDone("mirror", time.Second)
	text := scrape(t, m)
	if !strings.Contains(text, `modelserve_step_duration_seconds_count{step="smoke_test"} 1`) {
		t.Errorf("no smoke_test step in:\n%s", grep(text, "step_duration_seconds_count"))
	}
	if strings.Contains(text, `step="smoke test"`) {
		t.Error("a step label still has a space")
	}
	if !strings.Contains(text, `modelserve_step_duration_seconds_count{step="mirror"} 1`) {
		t.Error("the mirror step's label changed")
	}
}

func grep(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestUpdateCounters: checks are counted by result, and updates noticed
// on their own.
func TestUpdateCounters(t *testing.T) {
	m := metrics.New(nil)
	m.UpdateChecked("up_to_date")
	m.UpdateChecked("update_available")
	m.UpdateChecked("up_to_date")
	m.UpdateNoticed()
	text := scrape(t, m)
	for _, want := range []string{
		`modelserve_update_checks_total{result="up_to_date"} 2`,
		`modelserve_update_checks_total{result="update_available"} 1`,
		"modelserve_updates_noticed_total 1",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}
}

// TestEvalCounters: eval runs are counted by how they ended, and their
// cases by verdict.
func TestEvalCounters(t *testing.T) {
	m := metrics.New(nil)
	m.EvalRun("done")
	m.EvalRun("failed")
	m.EvalRun("done")
	m.EvalCase(true)
	m.EvalCase(false)
	m.EvalCase(false)
	text := scrape(t, m)
	for _, want := range []string{
		`modelserve_eval_runs_total{result="done"} 2`,
		`modelserve_eval_runs_total{result="failed"} 1`,
		`modelserve_eval_cases_total{result="pass"} 1`,
		`modelserve_eval_cases_total{result="fail"} 2`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}
}

// TestMirrorConnectionsAndRefetches: what a ranged fetch reports reaches
// the scrape.
func TestMirrorConnectionsAndRefetches(t *testing.T) {
	m := metrics.New(nil)
	m.MirrorConnections(3)
	m.MirrorConnections(-1)
	m.MirrorPartRefetched()
	text := scrape(t, m)
	for _, want := range []string{"modelserve_mirror_connections 2", "modelserve_mirror_parts_refetched_total 1"} {
		if !strings.Contains(text, want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}
}

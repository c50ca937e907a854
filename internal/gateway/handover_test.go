package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/testkit"
)

// TestHandedOverAnswersTheColdWaiters: a request waiting for a replica to
// start is answered once the gateway is told its modelserve handed the
// port over, with a 503 the OpenAI clients retry on a new connection, as
// is one that comes after; a request for a model with a replica ready is
// still admitted.
func TestHandedOverAnswersTheColdWaiters(t *testing.T) {
	f := &stubFleet{}
	fc := fakeClock()
	g, err := New(Options{Catalog: f, Fleet: f, Tokens: f, Metrics: prometheus.NewRegistry(), Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *apiError, 1)
	go func() {
		_, aerr := admitSent(context.Background(), g, catalog.Model{Name: "m"})
		got <- aerr
	}()
	testkit.WaitFor(t, 5*time.Second, "the request waiting", func() (bool, string) {
		_, w := g.pool("m").counts()
		return w == 1, fmt.Sprint(w, " waiting")
	})
	testkit.WaitWaiters(t, fc, admitWaits)
	testkit.Step(t, fc, pollCold, admitWaits)
	select {
	case aerr := <-got:
		t.Fatalf("the cold waiter was answered before the handover: %v", aerr)
	default:
	}

	g.HandedOver()
	var aerr *apiError
	select {
	case aerr = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the cold waiter is still waiting 5s after the handover")
	}
	if aerr == nil || aerr.Code != "handing_over" {
		t.Fatalf("the cold waiter after the handover: %v, want handing_over", aerr)
	}
	w := httptest.NewRecorder()
	aerr.write(w)
	h := w.Result().Header
	if w.Code != http.StatusServiceUnavailable || h.Get("x-should-retry") != "true" || h.Get("retry-after-ms") != "100" ||
		h.Get("Retry-After") != "1" || h.Get("Connection") != "close" {
		t.Errorf("the answer: %d %v; want 503, to retry after 100 ms on a new connection", w.Code, h)
	}
	if _, aerr := admitSent(context.Background(), g, catalog.Model{Name: "later"}); aerr == nil || aerr.Code != "handing_over" {
		t.Errorf("a request for a model not loaded, after the handover: %v, want handing_over", aerr)
	}

	f.mu.Lock()
	f.ready = []fleet.Replica{{ID: "m-1", Model: "m", Endpoint: "http://127.0.0.1:1"}}
	f.mu.Unlock()
	g.pool("m").read()
	if r, aerr := admitSent(context.Background(), g, catalog.Model{Name: "m"}); aerr != nil || r.ID != "m-1" {
		t.Errorf("a request for a model with a replica ready, after the handover: %v %v, want it admitted", r.ID, aerr)
	}
}

package fleet

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/ggufgen"
	"modelserve/internal/notify"
	"modelserve/internal/testkit"
)

// TestAParkedModelIsNotified: a model whose engine keeps failing is parked,
// and the operator's webhook hears so, with the engine's reason.
func TestAParkedModelIsNotified(t *testing.T) {
	got := make(chan map[string]any, 10)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &m); err != nil {
			t.Errorf("a notice that is not JSON: %s", b)
		}
		got <- m
	}))
	defer hook.Close()
	n, err := notify.New(hook.URL, nil, notify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go n.Run(ctx)

	db := testkit.OpenDB(t)
	cat := catalog.NewStore(db)
	f := MustRun(t, cat, Options{Parks: NewParks(db), Notify: n})
	MustAdd(t, f.notifying(cat), entry("foo", MustWriteModel(t, "foo.gguf", ggufgen.Spec{Architecture: "foo"}), 1))
	testkit.WaitFor(t, 2*readyWithin, "foo parked", func() (bool, string) {
		h, _ := f.health("foo")
		return h.Parked, "health " + h.Reason
	})
	var m map[string]any
	select {
	case m = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the webhook heard nothing of the park")
	}
	text, _ := m["text"].(string)
	if m["event"] != "parked" || m["model"] != "foo" || !strings.HasPrefix(text, "modelserve: foo is parked") ||
		!strings.Contains(text, "unknown model architecture: 'foo'") {
		t.Errorf("the notice: %v", m)
	}
}

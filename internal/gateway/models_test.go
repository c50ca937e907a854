package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/ggufgen"
	"modelserve/internal/testkit"
)

// TestModelsSayWhetherEachIsLoaded: through the official client, /v1/models
// says of a model loaded on demand that it is unloaded with no replica
// running before it is asked for, loading while its first request waits
// for it, and loaded with one replica running once it answers; unloaded
// again when it is stopped for being idle.
func TestModelsSayWhetherEachIsLoaded(t *testing.T) {
	e := mustEnv(t, Options{})
	e.mustAdd(chatModel(t, "kept", ggufgen.Spec{}))
	lazy := chatModel(t, "lazy", ggufgen.Spec{})
	lazy.Scaling = catalog.Scaling{Min: 0, Max: 1, IdleAfter: time.Second}
	e.mustAdd(lazy)
	e.waitServing("kept", 1)
	c := e.client(e.token)
	ctx := context.Background()
	listed := func() map[string]modelExtra {
		t.Helper()
		page, err := c.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]modelExtra{}
		for _, m := range page.Data {
			var x modelExtra
			if err := json.Unmarshal([]byte(m.JSON.ExtraFields["modelserve"].Raw()), &x); err != nil {
				t.Fatalf("%s's modelserve object: %v", m.ID, err)
			}
			out[m.ID] = x
		}
		return out
	}
	say := func(x modelExtra) string { return fmt.Sprintf("%s, %d replicas", x.State, x.Replicas) }

	now := listed()
	if got := say(now["kept"]); got != "loaded, 1 replicas" {
		t.Errorf("kept: %s; want loaded, 1 replicas", got)
	}
	if got := say(now["lazy"]); got != "unloaded, 0 replicas" {
		t.Errorf("lazy before any request: %s; want unloaded, 0 replicas", got)
	}

	answered := make(chan error, 1)
	go func() {
		_, err := c.Chat.Completions.New(ctx, hello("lazy", 2))
		answered <- err
	}()
	states := map[string]bool{}
	for waiting := true; waiting; {
		x := listed()["lazy"]
		states[x.State] = true
		if x.State == Loading && x.Replicas != 0 {
			t.Errorf("loading with %d replicas running", x.Replicas)
		}
		select {
		case err := <-answered:
			if err != nil {
				t.Fatalf("lazy's first request: %v", err)
			}
			waiting = false
		case <-time.After(5 * time.Millisecond):
		}
	}
	if !states[Loading] {
		t.Errorf("lazy was never said to be loading while its first request waited: %v", states)
	}
	if got := say(listed()["lazy"]); got != "loaded, 1 replicas" {
		t.Errorf("lazy once it answered: %s; want loaded, 1 replicas", got)
	}
	m, err := c.Models.Get(ctx, "lazy")
	if err != nil || !json.Valid([]byte(m.JSON.ExtraFields["modelserve"].Raw())) {
		t.Fatalf("get lazy: %+v, %v", m, err)
	}
	var one modelExtra
	json.Unmarshal([]byte(m.JSON.ExtraFields["modelserve"].Raw()), &one)
	if one.State != Loaded {
		t.Errorf("GET /v1/models/lazy says %q, want loaded", one.State)
	}

	testkit.WaitFor(t, 20*time.Second, "lazy unloaded once idle", func() (bool, string) {
		x := listed()["lazy"]
		return x.State == Unloaded && x.Replicas == 0, say(x)
	})
}

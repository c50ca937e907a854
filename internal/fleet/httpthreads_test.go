package fleet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/ggufgen"
	"modelserve/internal/llamatest"
)

// TestEngineTakesEveryConnectionAtFullDepth: an engine started with the
// fleet's arguments, with the gateway's connections to it all busy at
// once (catalog.Depth of its slots, kept alive between requests) and the
// fleet's readers' connections kept open beside them, answers every
// request at once. The engine's HTTP library serves a kept-alive
// connection on one thread until it has been idle for 5 s; with the
// engine's default threads the connections beyond them waited those
// seconds for one to time out.
func TestEngineTakesEveryConnectionAtFullDepth(t *testing.T) {
	m := entry("deep", MustWriteModel(t, "deep.gguf", ggufgen.Spec{}), 1)
	p := m.Profiles[0]
	p.Pool, p.Slots = 4096, 4
	url, _ := llamatest.Start(t, EngineArgs(m, p, m.Source, "", 0)...)
	llamatest.WaitReady(t, url, readyWithin)

	do := func(c *http.Client, method, route string, body []byte) (time.Duration, error) {
		req, _ := http.NewRequest(method, url+route, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		began := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("%s %s answered %s", method, route, resp.Status)
		}
		return time.Since(began), nil
	}
	// The fleet's readers, each on a connection of its own, kept.
	for range fleetReaders {
		reader := &http.Client{Transport: &http.Transport{}}
		if _, err := do(reader, http.MethodGet, "/slots", nil); err != nil {
			t.Fatal(err)
		}
	}
	// The gateway's pool: as many connections as it sends requests at
	// once, each kept for the next.
	depth := catalog.Depth(p.Slots)
	pooled := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: depth, MaxConnsPerHost: depth}}
	chat, _ := json.Marshal(map[string]any{"model": "deep", "max_tokens": 1,
		"messages": []map[string]string{{"role": "user", "content": "hi"}}})
	const within = 2 * time.Second // a tiny model answers in milliseconds
	for round := range 2 {
		var wg sync.WaitGroup
		took := make([]time.Duration, depth)
		errs := make([]error, depth)
		for i := range depth {
			wg.Add(1)
			go func() {
				defer wg.Done()
				took[i], errs[i] = do(pooled, http.MethodPost, "/v1/chat/completions", chat)
			}()
		}
		wg.Wait()
		for i := range depth {
			if errs[i] != nil {
				t.Fatalf("round %d, request %d at full depth: %v", round, i, errs[i])
			}
			if took[i] > within {
				t.Errorf("round %d, request %d of %d at once took %s: it waited for an HTTP thread of the engine",
					round, i, depth, took[i].Round(time.Millisecond))
			}
		}
	}
}

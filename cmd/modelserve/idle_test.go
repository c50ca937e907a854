package main

import (
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/llamatest"
	"modelserve/jobs"
)

// TestNoRequestLostToAnIdleStop: a model on demand with an idle time of a
// second, asked by a few clients at random intervals around that second,
// is stopped for idleness again and again while requests keep coming, many
// of them arriving as its replica is being stopped: every request is
// answered, by the replica still draining or by the next one started for
// it.
func TestNoRequestLostToAnIdleStop(t *testing.T) {
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Tiny-Llama-GGUF", "Tiny-Llama-Q4_K_M.gguf", ggufgen.Spec{ContextLength: 8192})
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: t.TempDir(), HFEndpoint: hub.URL(), LlamaServer: llamatest.Path(t)})
	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Tiny-Llama-GGUF", "replicas": 0, "idle_after": "1s",
		"context_length": 2048, "ctx_pool": 2048}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d %+v", code, job)
	}
	if seen := s.watch(job.ID, 2*time.Minute); seen[len(seen)-1].State != jobs.Done {
		t.Fatalf("serving ended %s: %s", seen[len(seen)-1].State, seen[len(seen)-1].Error)
	}
	var entry struct {
		Scaling struct {
			Min, Max  int
			IdleAfter string `json:"idle_after"`
		}
	}
	if code := s.do("GET", "/api/v1/catalog/tiny-llama", nil, &entry); code != http.StatusOK || entry.Scaling.IdleAfter != "1s" {
		t.Fatalf("the catalog entry: %d, scaling %+v; want idle_after 1s", code, entry.Scaling)
	}

	// Bounded in requests and in time, whatever happens.
	const (
		most    = 60
		clients = 2
	)
	deadline := time.Now().Add(time.Minute)
	c := openai.NewClient(option.WithBaseURL(s.base+"/v1/"), option.WithAPIKey(s.token), option.WithMaxRetries(0),
		option.WithRequestTimeout(time.Minute))
	var (
		mu     sync.Mutex
		sent   int
		failed []string
		wg     sync.WaitGroup
	)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				time.Sleep(500*time.Millisecond + rand.N(1500*time.Millisecond))
				mu.Lock()
				if sent >= most || time.Now().After(deadline) {
					mu.Unlock()
					return
				}
				sent++
				mu.Unlock()
				err := askOnce(c, "tiny-llama", 4, i, n)
				if err != nil {
					mu.Lock()
					failed = append(failed, err.Error())
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()

	// What says a replica stopped for idleness: the fleet's line as it
	// retires one, with the reason the fleet gives.
	idleStops := strings.Count(s.logs.String(), `why="no request for tiny-llama in 1s`)
	t.Logf("%d requests, %d failed, %d idle stops", sent, len(failed), idleStops)
	if len(failed) > 0 {
		t.Errorf("%d of %d requests failed; the first: %s", len(failed), sent, failed[0])
	}
	if sent < 30 {
		t.Errorf("only %d requests were sent: the load did not run", sent)
	}
	if idleStops < 3 {
		t.Errorf("the replica was stopped for idleness %d times, want at least 3: the requests did not meet an idle stop", idleStops)
	}
}

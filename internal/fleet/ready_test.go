package fleet

import (
	"context"
	"modelserve/catalog"
	"modelserve/internal/testkit"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"modelserve/internal/ggufgen"
)

// speakingNode starts engines that load for a moment, then write the line
// llama-server writes once its model is loaded, and answer on one HTTP
// server whose /health says loading (503) throughout: a replica it starts
// is ready only if the fleet takes the engine's word. It keeps when the
// engine was asked for its slots.
type speakingNode struct {
	fakeNode
	srv *httptest.Server

	mu        sync.Mutex
	slotsAsks []time.Time
}

func newSpeakingNode(t *testing.T) *speakingNode {
	n := &speakingNode{fakeNode: fakeNode{name: "local", cap: Capacity{CPUCores: 4, RAMBytes: 16 << 30, AvailableBytes: 16 << 30}}}
	n.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			http.Error(w, `{"error":{"code":503,"message":"Loading model"}}`, http.StatusServiceUnavailable)
		case "/slots":
			n.mu.Lock()
			n.slotsAsks = append(n.slotsAsks, time.Now())
			n.mu.Unlock()
			_, _ = w.Write([]byte(`[{"id":0,"n_ctx":512,"is_processing":false},{"id":1,"n_ctx":512,"is_processing":false}]`))
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	t.Cleanup(n.srv.Close)
	return n
}

func (n *speakingNode) Start(_ context.Context, spec Spec) (Process, error) {
	p := &speakingProcess{fakeProcess: fakeProcess{done: make(chan struct{})}, endpoint: n.srv.URL}
	go func() {
		// Long enough for the fleet to ask /health, and hear it loading.
		time.Sleep(30 * time.Millisecond)
		_, _ = spec.Output.Write([]byte("srv  llama_server: model loaded\nsrv  llama_server: listening on " + n.srv.URL + "\n"))
	}()
	return p, nil
}

func (n *speakingNode) firstSlotsAsk() (time.Time, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.slotsAsks) == 0 {
		return time.Time{}, false
	}
	return n.slotsAsks[0], true
}

type speakingProcess struct {
	fakeProcess
	endpoint string
}

func (p *speakingProcess) Endpoint() string { return p.endpoint }

// TestAnEngineThatSaysItListensIsReadyAtOnce: a cold start's request goes
// to the engine the moment it writes that it listens, with as many at
// once as its profile gave it slots; the fleet asks it nothing first,
// neither /health (a round trip the line made needless) nor its /slots
// (asked beside the first request, the engine answered them first).
func TestAnEngineThatSaysItListensIsReadyAtOnce(t *testing.T) {
	node := newSpeakingNode(t)
	cat := MustCatalog(t)
	f := MustRun(t, cat, Options{Nodes: []Node{node}, Engine: "/bin/true", LoadEvery: time.Hour})
	m := entry("tiny", MustWriteModel(t, "tiny.gguf", ggufgen.Spec{}), 0)
	m.Profiles[0].Pool, m.Profiles[0].Slots = 1024, 2
	MustAdd(t, f.notifying(cat), m)

	r := f.waitReady(t, "tiny", 5*time.Second) // its /health never says 200
	if r.Load == nil || r.Load.Size != catalog.SizeForSlots(2, 512) {
		t.Errorf("the ready replica's load is %s, want the 2 slots of 512 tokens its profile gave it", jsonOf(r.Load))
	}
	testkit.WaitFor(t, 5*time.Second, "the engine asked for its slots", func() (bool, string) {
		_, ok := node.firstSlotsAsk()
		return ok, "not asked"
	})
	asked, _ := node.firstSlotsAsk()
	if early := r.ReadyAt.Add(settleAfterReady); asked.Before(early) {
		t.Errorf("the engine was asked for its slots %s after it was ready, beside the first requests; want %s or later",
			asked.Sub(r.ReadyAt), settleAfterReady)
	}
}

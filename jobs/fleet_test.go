package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"modelserve/internal/fleet"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// fakeFleet is a fleet whose one replica becomes ready after a few looks,
// served by a real HTTP engine.
type fakeFleet struct {
	mu       sync.Mutex
	looks    int
	readyAt  int // the look at which the replica is ready; 0: never
	endpoint string
	health   fleet.ModelHealth
	panics   bool
}

func (f *fakeFleet) Replicas() []fleet.Replica {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.looks++
	state := fleet.Starting
	if f.readyAt > 0 && f.looks >= f.readyAt {
		state = fleet.Ready
	}
	return []fleet.Replica{{ID: "r1", Model: "tiny", Node: "node-a", Endpoint: f.endpoint, State: state}}
}

func (f *fakeFleet) ModelHealth() []fleet.ModelHealth {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.panics {
		panic("the fleet's table is corrupt")
	}
	return []fleet.ModelHealth{f.health}
}

func (f *fakeFleet) EngineKey(id string) string { return "key-" + id }

// engine answers as llama-server does, to clients with the key only:
// with status, or, for its first loads requests (all of them when loads is
// negative), 503 "Loading model" as it does while it loads the model.
func engine(t *testing.T, status, loads int) *httptest.Server {
	var mu sync.Mutex
	asked := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer key-r1" {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":{"code":401,"message":"Invalid API Key","type":"authentication_error"}}`))
			return
		}
		mu.Lock()
		asked++
		loading := loads < 0 || asked <= loads
		mu.Unlock()
		if loading {
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`))
			return
		}
		content := " Hello there. "
		if status == emptyReply {
			status, content = http.StatusOK, ""
		}
		if status != http.StatusOK {
			w.WriteHeader(status)
			w.Write([]byte(`{"error":{"code":500,"message":"failed to decode the prompt","type":"server_error"}}`))
			return
		}
		var req struct {
			Model string `json:"model"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		if req.Model != "tiny" {
			t.Errorf("the smoke test asked for model %q", req.Model)
		}
		switch r.URL.Path {
		case "/v1/chat/completions":
			// A reply that takes a tenth of a second, as the client sees
			// it, whatever the engine's own generation timing says.
			time.Sleep(100 * time.Millisecond)
			w.Write([]byte(`{"object":"chat.completion","choices":[{"index":0,"finish_reason":"stop",
				"message":{"role":"assistant","content":` + strconv.Quote(content) + `}}],
				"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13},
				"timings":{"predicted_n":4,"predicted_per_second":42.5}}`))
		case "/v1/embeddings":
			w.Write([]byte(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2,0.3]}]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// emptyReply, as engine's status, answers 200 with no text.
const emptyReply = -http.StatusOK

// TestPlacementAndSmoke runs the last two steps against a fleet and a real
// HTTP engine.
func TestPlacementAndSmoke(t *testing.T) {
	pooling := uint32(1)
	cases := []struct {
		name      string
		spec      ggufgen.Spec
		fleet     *fakeFleet
		status    int
		state     string // the job's end
		step      string // the step that decides it
		stepState string
		want      string
		wantReply string
		// wantTPS bounds the tokens a second: the wall clock's 4 tokens
		// over the reply's tenth of a second and more, not the engine's
		// 42.5; zero for none.
		wantTPS [2]float64
	}{
		{name: "ready and answering", fleet: &fakeFleet{readyAt: 3, health: fleet.ModelHealth{Model: "tiny"}}, status: 200,
			state: Done, step: StepSmoke, stepState: Done, want: ` tokens/s: "Hello there."`,
			wantReply: "Hello there.", wantTPS: [2]float64{4, 40}},
		{name: "an answer with no text says so", fleet: &fakeFleet{readyAt: 1, health: fleet.ModelHealth{Model: "tiny"}}, status: emptyReply,
			state: Done, step: StepSmoke, stepState: Done, want: "answered with no text, at ", wantTPS: [2]float64{4, 40}},
		{name: "embedding model", spec: ggufgen.Spec{Pooling: &pooling},
			fleet: &fakeFleet{readyAt: 1, health: fleet.ModelHealth{Model: "tiny"}}, status: 200,
			state: Done, step: StepSmoke, stepState: Done, want: "answered with a vector of 3 dimensions",
			wantReply: "a vector of 3 dimensions"},
		{name: "parked", fleet: &fakeFleet{health: fleet.ModelHealth{Model: "tiny", Parked: true, Failures: 3,
			Reason: "error loading model: tensor 'blk.0' is corrupted"}},
			state: Failed, step: StepPlacement, stepState: Failed,
			want: "it failed to start 3 times and is parked: error loading model: tensor 'blk.0' is corrupted"},
		{name: "hardware busy", fleet: &fakeFleet{health: fleet.ModelHealth{Model: "tiny", Unplaceable: true, HardwareExists: true,
			Placement: "node-a: 2 GB free of the 8 GB it needs"}},
			state: Done, step: StepPlacement, stepState: Skipped,
			want: "the hardware it fits is in use: it is in the catalog and starts when there is room"},
		{name: "engine refuses", fleet: &fakeFleet{readyAt: 1, health: fleet.ModelHealth{Model: "tiny"}}, status: 500,
			state: Failed, step: StepSmoke, stepState: Failed, want: "the gateway answered 500 Internal Server Error: failed to decode the prompt"},
		{name: "fleet panics", fleet: &fakeFleet{panics: true},
			state: Failed, step: StepPlacement, stepState: Failed,
			want: "the job stopped on an internal error; the server's log has the details"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.fleet
			f.endpoint = engine(t, tc.status, 0).URL
			e := newEnv(t, withNodeMemory(64<<30), withFleet(f))
			e.addModel(tinyRepo, hubtest.RepoOptions{}, map[string]ggufgen.Spec{tinyFile: tc.spec})
			j := MustEnd(t, e.srv, MustStart(t, e.srv, Request{Repo: tinyRepo, Replicas: 1}).ID)
			if j.State != tc.state {
				t.Fatalf("job ended %s (%s); want %s", j.State, j.Error, tc.state)
			}
			st := MustStep(t, j, tc.step)
			if st.State != tc.stepState || !strings.Contains(st.Detail, tc.want) {
				t.Errorf("step %s is %s: %q; want %s saying %q", tc.step, st.State, st.Detail, tc.stepState, tc.want)
			}
			if j.Reply != tc.wantReply || j.TokensPerSecond < tc.wantTPS[0] || j.TokensPerSecond > tc.wantTPS[1] {
				t.Errorf("reply %q at %v tokens/s; want %q at %v to %v", j.Reply, j.TokensPerSecond, tc.wantReply, tc.wantTPS[0], tc.wantTPS[1])
			}
			if tc.wantReply != "" {
				if d := MustStep(t, j, StepPlacement).Detail; d != "r1 ready on node-a at "+f.endpoint {
					t.Errorf("placement says %q", d)
				}
			}
			stored, err := e.srv.Get(context.Background(), j.ID)
			if err != nil || stored.State != tc.state {
				t.Errorf("stored as %s (%v)", stored.State, err)
			}
			// A job that serves it, or leaves it waiting for room, leaves
			// the model in the catalog; one that fails takes out the
			// entry it added, so nothing half-served stays behind.
			_, err = e.catalog.Get(context.Background(), "tiny")
			if tc.state == Done && err != nil {
				t.Errorf("the model is not in the catalog: %v", err)
			}
			if tc.state == Failed && !errors.Is(err, catalog.ErrNotFound) {
				t.Errorf("after the job failed the catalog has the model it added (%v)", err)
			}
		})
	}
}

// TestSmokeWaitsOutLoading: an engine offered as ready that still says
// it is loading the model is asked again, the step saying so, until it
// answers or the smoke test's limit passes.
func TestSmokeWaitsOutLoading(t *testing.T) {
	cases := []struct {
		name  string
		loads int
		state string
		want  string
	}{
		{name: "loads for a while, then answers", loads: 2, state: Done, want: `tokens/s: "Hello there."`},
		{name: "loads beyond the limit", loads: -1, state: Failed,
			want: "the engine was still loading the model after 3s, the smoke test's limit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeFleet{readyAt: 1, health: fleet.ModelHealth{Model: "tiny"}}
			f.endpoint = engine(t, http.StatusOK, tc.loads).URL
			e := newEnv(t, withNodeMemory(64<<30), withFleet(f), func(e *testEnv) { e.deps.SmokeTimeout = 3 * time.Second })
			e.addModel(tinyRepo, hubtest.RepoOptions{}, map[string]ggufgen.Spec{tinyFile: {}})
			j := MustStart(t, e.srv, Request{Repo: tinyRepo, Replicas: 1})
			ch, stop := e.srv.Subscribe(j.ID)
			defer stop()
			// What the smoke step said on the way, as the job's page shows it.
			var said []string
			timeout := time.After(20 * time.Second)
			for !j.Ended() {
				select {
				case ev, ok := <-ch:
					if !ok {
						t.Fatalf("the job's events ended before the job; the smoke step said %q", said)
					}
					j = ev.Job
					if st, ok := j.Step(StepSmoke); ok && st.State == Running {
						said = append(said, st.Detail)
					}
				case <-timeout:
					t.Fatalf("the job did not end within 20s; the smoke step said %q", said)
				}
			}
			if st := MustStep(t, j, StepSmoke); j.State != tc.state || !strings.Contains(st.Detail, tc.want) {
				t.Errorf("job ended %s, its smoke step saying %q; want %s saying %q", j.State, st.Detail, tc.state, tc.want)
			}
			if !slices.ContainsFunc(said, func(d string) bool { return strings.HasPrefix(d, "r1 is still loading the model (") }) {
				t.Errorf("the smoke step never said the engine was still loading: %q", said)
			}
		})
	}
}

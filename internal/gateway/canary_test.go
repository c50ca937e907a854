package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/ggufgen"
	"modelserve/internal/llamatest"
	"modelserve/internal/testkit"
)

// canaryCommit is the commit of the new weights a canary runs.
const canaryCommit = "3f2a1b09e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3"

// canaryModel is the catalog entry of model of's new version, taking share
// of its requests: the same tiny model, as an update's would be.
func canaryModel(t testing.TB, of string, share float64) catalog.Model {
	m := chatModel(t, catalog.CanaryName(of, canaryCommit), ggufgen.Spec{})
	m.Canary = &catalog.Canary{Of: of, Share: share}
	return m
}

// setShare gives canary c share of its model's requests, as the judge
// does while it promotes (the entry is otherwise unchanged, so its
// replica runs on), and has the gateway read it at once.
func (e *env) setShare(c catalog.Model, share float64) {
	e.t.Helper()
	if err := e.cat.SetShare(context.Background(), c.Name, share); err != nil {
		e.t.Fatal(err)
	}
	e.gw.Refresh()
}

// ask sends n chat requests naming model through the official client,
// streaming every other one, and checks that each is answered, naming
// want and nothing of a canary.
func (e *env) ask(t *testing.T, c *openai.Client, model, want string, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		// Exactly two tokens each, whatever the tiny model says: the
		// engines' own token counts are then twice their requests.
		params := hello(model, 2)
		opts := []option.RequestOption{option.WithJSONSet("ignore_eos", true)}
		if i%2 == 0 {
			res, err := c.Chat.Completions.New(ctx, params, opts...)
			if err != nil {
				t.Fatalf("request %d naming %s: %v", i, model, err)
			}
			if res.Model != want || strings.Contains(res.RawJSON(), canaryCommit[:7]) {
				t.Fatalf("request %d naming %s: the answer names %q (%s); want %s", i, model, res.Model, res.RawJSON(), want)
			}
			continue
		}
		stream := c.Chat.Completions.NewStreaming(ctx, params, opts...)
		chunks := 0
		for stream.Next() {
			ch := stream.Current()
			chunks++
			if ch.Model != want || strings.Contains(ch.RawJSON(), canaryCommit[:7]) {
				t.Fatalf("stream %d naming %s: a chunk names %q (%s); want %s", i, model, ch.Model, ch.RawJSON(), want)
			}
		}
		if err := stream.Err(); err != nil || chunks == 0 {
			t.Fatalf("stream %d naming %s: %d chunks, %v", i, model, chunks, err)
		}
	}
}

// engineTokens is how many tokens the engine of replica rep generated
// since it started, in its own words (its /metrics).
func (e *env) engineTokens(rep fleet.Replica) int {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, rep.Endpoint+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+e.fleet.EngineKey(rep.ID))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("the metrics of %s: %v", rep.ID, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "llamacpp:tokens_predicted_total "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				e.t.Fatalf("the metrics of %s: %q", rep.ID, sc.Text())
			}
			return int(n)
		}
	}
	e.t.Fatalf("the metrics of %s (%s) have no llamacpp:tokens_predicted_total", rep.ID, resp.Status)
	return 0
}

// TestCanaryTakesItsShare: a model's canary takes exactly its share of the
// requests naming the model (by name or alias), counted per version by the
// meters, the gateway's metrics and the engines themselves, and unseen by
// the client; the split follows the share as the judge moves it, and the
// canary's removal; a canary with no replica ready takes nothing.
func TestCanaryTakesItsShare(t *testing.T) {
	e := mustEnv(t, Options{})
	chatty := chatModel(t, "chatty", ggufgen.Spec{})
	chatty.Aliases = []string{"chatty-latest"}
	e.mustAdd(chatty)
	canary := canaryModel(t, "chatty", 0.1)
	e.mustAdd(canary)
	name := canary.Name // chatty@3f2a1b0
	old := e.waitServing("chatty", 1)[0]
	rep := e.waitServing(name, 1)[0]
	c := e.client(e.token)
	ctx := context.Background()

	// served is what each version served of the n requests fn sends: by
	// their meters.
	served := func(n int, fn func()) (old, canary Measurement) {
		t.Helper()
		mo, mc := e.gw.Measure("chatty"), e.gw.Measure(name)
		defer mo.Stop()
		defer mc.Stop()
		fn()
		testkit.WaitFor(t, 2*time.Second, fmt.Sprintf("%d requests counted", n), func() (bool, string) {
			o, c := mo.Read(), mc.Read()
			return o.Requests+c.Requests >= n, fmt.Sprintf("%+v, %+v", o, c)
		})
		return mo.Read(), mc.Read()
	}

	t.Run("a share of 0.1 is 20 requests in 200", func(t *testing.T) {
		tokOld, tokNew := e.engineTokens(old), e.engineTokens(rep)
		mo, mc := served(200, func() {
			e.ask(t, c, "chatty", "chatty", 100)
			e.ask(t, c, "chatty-latest", "chatty", 100)
		})
		if mo.Requests != 180 || mo.Answered != 180 || mc.Requests != 20 || mc.Answered != 20 || mo.Failed+mc.Failed != 0 {
			t.Errorf("served by chatty %+v, by its canary %+v; want 180 and 20, all answered", mo, mc)
		}
		// The engines saw as much: two tokens a request.
		if got := e.engineTokens(old) - tokOld; got != 2*180 {
			t.Errorf("chatty's engine generated %d tokens, want %d (180 requests)", got, 2*180)
		}
		if got := e.engineTokens(rep) - tokNew; got != 2*20 {
			t.Errorf("the canary's engine generated %d tokens, want %d (20 requests)", got, 2*20)
		}
		// And /metrics says it per version.
		e.waitCounter(t, e.gw.metrics.requests, 180, "chatty", old.ID, "200")
		e.waitCounter(t, e.gw.metrics.requests, 20, name, rep.ID, "200")
		tr := e.gw.Traffic()
		if tr["chatty"].Answered != 180 || tr[name].Answered != 20 {
			t.Errorf("the last minute: chatty %+v, the canary %+v", tr["chatty"], tr[name])
		}
		if got, share, ok := e.gw.Split("chatty-latest"); got != name || share != 0.1 || !ok {
			t.Errorf("Split: %q %v %v; want %s 0.1", got, share, ok, name)
		}
	})

	t.Run("hidden from clients", func(t *testing.T) {
		_, err := c.Chat.Completions.New(ctx, hello(name, 2))
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound || ae.Code != "model_not_found" ||
			ae.Message != `the model "`+name+`" does not exist; GET /v1/models lists them` {
			t.Errorf("naming the canary: %v; want the 404 of an unknown model", err)
		}
		page, err := c.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range page.Data {
			ids = append(ids, m.ID)
		}
		if strings.Join(ids, ",") != "chatty,chatty-latest" {
			t.Errorf("/v1/models lists %v; want chatty and its alias alone", ids)
		}
		if _, err := c.Models.Get(ctx, name); !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound || ae.Code != "model_not_found" {
			t.Errorf("GET /v1/models/%s: %v; want a 404", name, err)
		}

		// modelserve's own caller asks the new version alone.
		_, mc := served(1, func() {
			b, _ := json.Marshal(map[string]any{"model": name, "max_tokens": 2, "messages": []map[string]string{{"role": "user", "content": "hi"}}})
			out, err := e.gw.Ask(ctx, "/v1/chat/completions", b)
			var res struct{ Model string }
			if err != nil || json.Unmarshal(out, &res) != nil || res.Model != name {
				t.Errorf("Ask naming the canary: %s, %v", out, err)
			}
		})
		if mc.Answered != 1 {
			t.Errorf("Ask naming the canary: served by it %+v, want 1", mc)
		}
	})

	t.Run("share 0 sends nothing to the canary", func(t *testing.T) {
		e.setShare(canary, 0)
		mo, mc := served(20, func() { e.ask(t, c, "chatty", "chatty", 20) })
		if mo.Answered != 20 || mc.Requests != 0 {
			t.Errorf("served by chatty %+v, by its canary %+v; want all by chatty", mo, mc)
		}
		if got, share, ok := e.gw.Split("chatty"); got != name || share != 0 || !ok {
			t.Errorf("Split: %q %v %v; want %s 0", got, share, ok, name)
		}
	})

	t.Run("share 1 sends everything", func(t *testing.T) {
		e.setShare(canary, 1)
		mo, mc := served(20, func() { e.ask(t, c, "chatty", "chatty", 20) })
		if mo.Requests != 0 || mc.Answered != 20 {
			t.Errorf("served by chatty %+v, by its canary %+v; want all by the canary", mo, mc)
		}
	})

	t.Run("the split follows the catalog within CatalogEvery", func(t *testing.T) {
		// Written without Refresh: the gateway sees it at its next read.
		written := time.Now()
		if err := e.cat.SetShare(ctx, name, 0.5); err != nil {
			t.Fatal(err)
		}
		m := e.gw.Measure("chatty")
		defer m.Stop()
		for m.Read().Requests == 0 {
			if time.Since(written) > time.Second+500*time.Millisecond {
				t.Fatalf("share 0.5 written %s ago, and still every request goes to the canary", time.Since(written))
			}
			e.ask(t, c, "chatty", "chatty", 1)
		}
	})

	t.Run("removing the canary sends everything to the model", func(t *testing.T) {
		if err := e.cat.Remove(ctx, name); err != nil {
			t.Fatal(err)
		}
		e.gw.Refresh()
		mo, mc := served(20, func() { e.ask(t, c, "chatty", "chatty", 20) })
		if mo.Answered != 20 || mc.Requests != 0 {
			t.Errorf("served by chatty %+v, by the removed canary %+v", mo, mc)
		}
		if got, _, ok := e.gw.Split("chatty"); ok {
			t.Errorf("Split says %s after its removal", got)
		}
	})

	t.Run("a canary with no replica ready takes nothing", func(t *testing.T) {
		// Loaded on demand, so none runs: the split does not start one.
		lazy := canaryModel(t, "chatty", 0.5)
		lazy.Name = catalog.CanaryName("chatty", "0123456789abcdef")
		lazy.Scaling = catalog.Scaling{Min: 0, Max: 1}
		e.mustAdd(lazy)
		e.gw.Refresh()
		mo, mc := served(20, func() { e.ask(t, c, "chatty", "chatty", 20) })
		if mo.Answered != 20 || mc.Requests != 0 {
			t.Errorf("served by chatty %+v, by its canary %+v; want all by chatty", mo, mc)
		}
		if got, share, ok := e.gw.Split("chatty"); got != lazy.Name || share != 0 || !ok {
			t.Errorf("Split: %q %v %v; want %s taking 0 for now", got, share, ok, lazy.Name)
		}
		for _, r := range e.fleet.Replicas() {
			if r.Model == lazy.Name {
				t.Errorf("the split started a replica of the canary: %+v", r)
			}
		}
	})
}

// ownEngineFleet is the fleet with model's one ready replica an engine
// the test started, so the test can kill it and the fleet does not start
// another: the moment between an engine's death and the fleet noticing.
type ownEngineFleet struct {
	*fleet.Fleet
	model string
	rep   fleet.Replica
	key   string
}

func (f ownEngineFleet) Serving(model string) []fleet.Replica {
	if model == f.model {
		return []fleet.Replica{f.rep}
	}
	return f.Fleet.Serving(model)
}

func (f ownEngineFleet) EngineKey(id string) string {
	if id == f.rep.ID {
		return f.key
	}
	return f.Fleet.EngineKey(id)
}

func (f ownEngineFleet) Hold(id string, askedAt time.Time) (func(), bool) {
	if id == f.rep.ID {
		return func() {}, true
	}
	return f.Fleet.Hold(id, askedAt)
}

func (f ownEngineFleet) Use(model string, replicas int, askedAt time.Time) func() {
	if model == f.model {
		return func() {}
	}
	return f.Fleet.Use(model, replicas, askedAt)
}

// TestADeadCanaryIsCoveredByItsModel: when the canary's engine is killed,
// the requests the split gives it are answered by the model, and the
// canary's meter counts them failed.
func TestADeadCanaryIsCoveredByItsModel(t *testing.T) {
	canary := canaryModel(t, "chatty", 0.5)
	canary.Scaling = catalog.Scaling{Min: 0, Max: 1} // the test runs its engine
	url, cmd := llamatest.Start(t, append([]string{"-m", canary.Source, "--alias", canary.Name, "--api-key", "canary-key"}, tinyArgs...)...)
	llamatest.WaitReady(t, url, readyWithin)
	e := mustEnv(t, Options{}, func(f *fleet.Fleet) Fleet {
		return ownEngineFleet{Fleet: f, model: canary.Name, key: "canary-key",
			rep: fleet.Replica{ID: canary.Name + "-1", Model: canary.Name, Endpoint: url, State: fleet.Ready, Load: &fleet.Load{Size: catalog.Size{Slots: 1}}}}
	})
	e.mustAdd(chatModel(t, "chatty", ggufgen.Spec{}))
	e.mustAdd(canary)
	e.waitServing("chatty", 1)
	c := e.client(e.token)

	alive, mo := e.gw.Measure(canary.Name), e.gw.Measure("chatty")
	e.ask(t, c, "chatty", "chatty", 10)
	waitRequests(t, mo, 5)
	waitRequests(t, alive, 5)
	alive.Stop()
	if got := alive.Read(); got.Answered != 5 || got.Failed != 0 {
		t.Fatalf("the canary alive served %+v; want 5 answered", got)
	}

	llamatest.Stop(cmd) // SIGKILL
	dead := e.gw.Measure(canary.Name)
	defer dead.Stop()
	e.ask(t, c, "chatty", "chatty", 20) // fails the test on any error
	waitRequests(t, mo, 25)
	if got := dead.Read(); got.Requests != 10 || got.Failed != 10 || got.Answered != 0 {
		t.Errorf("the dead canary's meter: %+v; want its 10 requests failed", got)
	}
	if got := mo.Read(); got.Answered != 25 || got.Failed != 0 {
		t.Errorf("chatty served %+v; want its 5 and the canary's 10 of the first 10, its 10 and the canary's 10 of the next 20", got)
	}
	if n := e.counter(e.gw.metrics.requests, canary.Name, canary.Name+"-1", "502"); n != 10 {
		t.Errorf("%v requests to the dead canary counted 502, want 10", n)
	}
	if !strings.Contains(e.logs.String(), "a replica did not answer") {
		t.Error("the canary's failure is not logged")
	}
}

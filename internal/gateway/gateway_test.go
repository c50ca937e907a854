package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"modelserve/catalog"
	"modelserve/internal/auth"
	"modelserve/internal/fleet"
	"modelserve/internal/ggufgen"
	"modelserve/internal/testkit"
)

// hello is a short chat: the tiny model answers it in a few milliseconds.
// hello asks at temperature 0 with a seed: the tiny model's weights are
// noise, and sampled freely it now and then ended its answer at once (a
// stream of two chunks and no text), which a test of the way there cannot
// tell from a gateway that lost the text.
func hello(model string, maxTokens int64) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:       model,
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are terse."), openai.UserMessage("Say hello.")},
		MaxTokens:   openai.Int(maxTokens),
		Temperature: openai.Float(0),
		Seed:        openai.Int(42),
	}
}

// TestOpenAIClientListsChatsStreamsAndEmbeds is the "done when": the
// official OpenAI client lists, chats (plain and streaming) and embeds
// against modelserve by model name with a modelserve token.
func TestOpenAIClientListsChatsStreamsAndEmbeds(t *testing.T) {
	e := mustEnv(t, Options{})
	tiny := chatModel(t, "tiny", ggufgen.Spec{})
	tiny.Aliases = []string{"tiny-alias"}
	e.mustAdd(tiny)
	e.mustAdd(embedModel(t, "embed"))
	e.waitServing("tiny", 1)
	e.waitServing("embed", 1)
	c := e.client(e.token)
	ctx := context.Background()

	t.Run("list", func(t *testing.T) {
		page, err := c.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]openai.Model{}
		for _, m := range page.Data {
			ids[m.ID] = m
		}
		for _, id := range []string{"tiny", "tiny-alias", "embed"} {
			m, ok := ids[id]
			if !ok || m.OwnedBy != "modelserve" || m.Created == 0 {
				t.Errorf("model %s: %+v (listed: %v)", id, m, page.Data)
			}
		}
		var extra modelExtra
		if err := json.Unmarshal([]byte(ids["tiny"].JSON.ExtraFields["modelserve"].Raw()), &extra); err != nil ||
			!extra.Ready || extra.Replicas != 1 || len(extra.Aliases) != 1 {
			t.Errorf("tiny's modelserve extras: %+v, %v", extra, err)
		}
		if raw := ids["tiny-alias"].JSON.ExtraFields["modelserve"].Raw(); !strings.Contains(raw, `"alias_of":"tiny"`) {
			t.Errorf("the alias does not say what it reaches: %s", raw)
		}
		if m, err := c.Models.Get(ctx, "tiny-alias"); err != nil || m.ID != "tiny-alias" {
			t.Errorf("get tiny-alias: %+v, %v", m, err)
		}
	})

	t.Run("chat", func(t *testing.T) {
		for _, name := range []string{"tiny", "tiny-alias"} {
			res, err := c.Chat.Completions.New(ctx, hello(name, 8))
			if err != nil {
				t.Fatalf("chat with %s: %v", name, err)
			}
			if len(res.Choices) != 1 || res.Choices[0].Message.Role != "assistant" || res.Choices[0].Message.Content == "" {
				t.Errorf("chat with %s: no reply: %+v", name, res.Choices)
			}
			if res.Model != "tiny" || res.Usage.CompletionTokens == 0 || res.Usage.PromptTokens == 0 {
				t.Errorf("chat with %s: model %q, usage %+v; want tiny with its usage", name, res.Model, res.Usage)
			}
		}
	})

	t.Run("stream", func(t *testing.T) {
		params := hello("tiny", 24)
		params.StreamOptions.IncludeUsage = openai.Bool(true)
		stream := c.Chat.Completions.NewStreaming(ctx, params)
		chunks, reply := 0, ""
		var usage openai.CompletionUsage
		for stream.Next() {
			ch := stream.Current()
			chunks++
			for _, choice := range ch.Choices {
				reply += choice.Delta.Content
			}
			if ch.Usage.CompletionTokens > 0 {
				usage = ch.Usage
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if chunks < 2 || reply == "" {
			t.Errorf("stream: %d chunks, reply %q; want several chunks making a reply", chunks, reply)
		}
		if usage.CompletionTokens == 0 {
			t.Errorf("the stream's last chunk had no usage")
		}
	})

	t.Run("embeddings", func(t *testing.T) {
		res, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
			Model: "embed", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello world")},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Data) != 1 || len(res.Data[0].Embedding) != 96 {
			t.Fatalf("embeddings: %d vectors, first %d long; want one of 96", len(res.Data), len(res.Data[0].Embedding))
		}
	})

	t.Run("metrics", func(t *testing.T) {
		e.waitCounter(t, e.gw.metrics.requests, 3, "tiny", "tiny-1", "200")
		if n := e.counter(e.gw.metrics.tokens, "tiny", "tiny-1", "completion"); n == 0 {
			t.Error("no completion tokens counted")
		}
		e.waitCounter(t, e.gw.metrics.requests, 1, "embed", "embed-1", "200")
	})

	// The engine's key is the gateway's secret: never in a log.
	for _, r := range e.fleet.Replicas() {
		if key := e.fleet.EngineKey(r.ID); key == "" || strings.Contains(e.logs.String(), key) {
			t.Errorf("the engine key of %s is in the log (or missing)", r.ID)
		}
	}
}

// TestRefusals: what a client does wrong is refused in OpenAI's error shape,
// with the status the OpenAI clients act on and a sentence saying what to do.
func TestRefusals(t *testing.T) {
	e := mustEnv(t, Options{MaxBody: 4 << 10})
	e.mustAdd(chatModel(t, "tiny", ggufgen.Spec{}))
	other := chatModel(t, "other", ggufgen.Spec{})
	other.Scaling = catalog.Scaling{Min: 0, Max: 1}
	e.mustAdd(other)
	e.waitServing("tiny", 1)
	onlyTiny := e.mustToken("only-tiny", auth.Limits{Models: []string{"tiny"}})
	ctx := context.Background()
	chat := map[string]any{"model": "tiny", "max_tokens": 2, "messages": []map[string]string{{"role": "user", "content": "hi"}}}

	for _, c := range []struct {
		name   string
		path   string
		token  string
		body   any
		status int
		code   string
		says   string
	}{
		{"no token", "/v1/chat/completions", "", chat, 401, "invalid_api_key", "needs a modelserve API token"},
		{"a forged token", "/v1/chat/completions", "ms_forged", chat, 401, "invalid_api_key", "not one modelserve issued"},
		{"not JSON", "/v1/chat/completions", e.token, "{", 400, "invalid_json", "not a JSON object"},
		{"no model", "/v1/chat/completions", e.token, map[string]any{"messages": []any{}}, 400, "missing_model", "names no model"},
		{"an unknown model", "/v1/chat/completions", e.token, map[string]any{"model": "gpt-9"}, 404, "model_not_found", `the model "gpt-9" does not exist; GET /v1/models lists them`},
		{"too large", "/v1/completions", e.token, map[string]any{"model": "tiny", "prompt": strings.Repeat("x", 8<<10)}, 413, "request_too_large", "larger than"},
		{"a model the token may not use", "/v1/chat/completions", onlyTiny, map[string]any{"model": "other"}, 404, "model_not_found", `the model "other" does not exist; GET /v1/models lists them`},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, body := e.post(ctx, c.path, c.token, c.body)
			if resp.StatusCode != c.status {
				t.Fatalf("%d %s; want %d", resp.StatusCode, body, c.status)
			}
			ae := apiErr(t, body)
			if ae.Code != c.code || !strings.Contains(ae.Message, c.says) {
				t.Errorf("error %+v; want code %s saying %q", ae, c.code, c.says)
			}
		})
	}
	if rs := e.fleet.Replicas(); len(rs) != 1 {
		t.Errorf("a refused request started a replica: %+v", rs)
	}

	t.Run("the official client sees the errors", func(t *testing.T) {
		_, err := e.client("ms_wrong").Chat.Completions.New(ctx, hello("tiny", 2))
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusUnauthorized {
			t.Errorf("bad key: %v, want a 401", err)
		}
		_, err = e.client(e.token).Chat.Completions.New(ctx, hello("nope", 2))
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound || ae.Code != "model_not_found" || !strings.Contains(ae.Message, `"nope"`) {
			t.Errorf("unknown model: %v, want a 404 naming it", err)
		}
	})

	t.Run("a token limited to a model", func(t *testing.T) {
		c := e.client(onlyTiny)
		if _, err := c.Chat.Completions.New(ctx, hello("tiny", 2)); err != nil {
			t.Errorf("on its own model: %v", err)
		}
		page, err := c.Models.List(ctx)
		if err != nil || len(page.Data) != 1 || page.Data[0].ID != "tiny" {
			t.Errorf("it lists %+v, %v; want tiny alone", page, err)
		}
	})

	t.Run("an unknown route", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, e.url+"/v1/files", nil)
		req.Header.Set("Authorization", "Bearer "+e.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET /v1/files: %d, want 404", resp.StatusCode)
		}
	})
}

// TestColdStart: a model that keeps no replica starts one for its first
// requests, one between ten of them, answers them all, and stops once idle.
func TestColdStart(t *testing.T) {
	e := mustEnv(t, Options{})
	lazy := chatModel(t, "lazy", ggufgen.Spec{})
	lazy.Scaling = catalog.Scaling{Min: 0, Max: 3, IdleAfter: time.Second}
	e.mustAdd(lazy)
	// Three passes of the fleet over the catalog with it, each done whole.
	for range 3 {
		if err := e.fleet.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if rs := e.fleet.Replicas(); len(rs) != 0 {
		t.Fatalf("replicas before any request: %+v", rs)
	}

	c := e.client(e.token)
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.Chat.Completions.New(context.Background(), hello("lazy", 4))
			if err == nil && (len(res.Choices) != 1 || res.Model != "lazy") {
				err = fmt.Errorf("not an answer from lazy: %+v", res)
			}
			errs <- err
		}()
	}
	// While they wait, the replica loads: exactly one, however many ask.
	seen := map[string]bool{}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	for waiting := true; waiting; {
		for _, r := range e.fleet.Replicas() {
			seen[r.ID] = true
		}
		select {
		case <-finished:
			waiting = false
		case <-time.After(5 * time.Millisecond):
		}
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a first request: %v", err)
		}
	}
	if len(seen) != 1 || !seen["lazy-1"] {
		t.Errorf("replicas started for ten first requests: %v; want lazy-1 alone", seen)
	}
	if n := e.counter(e.gw.metrics.coldStarts, "lazy"); n != 1 {
		t.Errorf("%v cold starts counted, want 1", n)
	}

	// Idle for its IdleAfter (1 s): stopped.
	testkit.WaitFor(t, 15*time.Second, "lazy stopped when idle", func() (bool, string) {
		rs := e.fleet.Replicas()
		return len(rs) == 0, fmt.Sprintf("%+v", rs)
	})
	// And asked for again, started again.
	if _, err := c.Chat.Completions.New(context.Background(), hello("lazy", 2)); err != nil {
		t.Fatalf("after the idle stop: %v", err)
	}
	if rs := e.fleet.Serving("lazy"); len(rs) != 1 || rs[0].ID != "lazy-2" {
		t.Errorf("serving after a second cold start: %+v, want lazy-2", rs)
	}
}

// TestAnswersSayWhereTheirTimeWent: every answer relayed from an engine
// says, in its Server-Timing header, how long it waited in modelserve for
// a replica and how long the engine took to begin its answer. The first
// request for a cold model waited through its replica's whole load; the
// next waited next to nothing; neither says more time than the client
// saw pass; a stream says it too.
func TestAnswersSayWhereTheirTimeWent(t *testing.T) {
	e := mustEnv(t, Options{})
	lazy := chatModel(t, "lazy", ggufgen.Spec{})
	lazy.Scaling = catalog.Scaling{Min: 0, Max: 1, IdleAfter: time.Hour}
	e.mustAdd(lazy)
	c := e.client(e.token)

	ask := func(what string) (wait, engine, took time.Duration) {
		t.Helper()
		var resp *http.Response
		began := time.Now()
		if _, err := c.Chat.Completions.New(context.Background(), hello("lazy", 4), option.WithResponseInto(&resp)); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		took = time.Since(began)
		wait, engine = timingOf(t, what, resp.Header)
		if wait+engine > took {
			t.Errorf("%s: says it waited %s and the engine took %s, more than the %s the client saw pass", what, wait, engine, took)
		}
		if engine <= 0 {
			t.Errorf("%s: says the engine took %s", what, engine)
		}
		return wait, engine, took
	}
	coldWait, _, _ := ask("the first request, for a cold model")
	rs := e.fleet.Replicas()
	if len(rs) != 1 || rs[0].ReadyAt.IsZero() {
		t.Fatalf("replicas after the first request: %+v", rs)
	}
	if load := rs[0].ReadyAt.Sub(rs[0].Started); coldWait < load {
		t.Errorf("the first request says it waited %s, less than its replica's load (%s), which it waited through", coldWait, load)
	}
	warmWait, _, _ := ask("a request for a ready replica")
	if warmWait >= coldWait/2 || warmWait > 50*time.Millisecond {
		t.Errorf("a request for a ready replica says it waited %s (the cold one %s)", warmWait, coldWait)
	}

	resp, body := e.post(context.Background(), "/v1/chat/completions", e.token, map[string]any{
		"model": "lazy", "stream": true, "max_tokens": 4, "messages": []map[string]string{{"role": "user", "content": "Say hello."}}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "[DONE]") {
		t.Fatalf("a stream: %d %s", resp.StatusCode, body)
	}
	timingOf(t, "a stream", resp.Header)
}

// timingOf reads the wait and engine durations of a Server-Timing header
// (metric;desc="...";dur=ms, comma-separated), failing when either is
// missing.
func timingOf(t *testing.T, what string, h http.Header) (wait, engine time.Duration) {
	t.Helper()
	got := map[string]time.Duration{}
	for _, v := range h.Values("Server-Timing") {
		for metric := range strings.SplitSeq(v, ",") {
			params := strings.Split(strings.TrimSpace(metric), ";")
			for _, p := range params[1:] {
				if ms, ok := strings.CutPrefix(p, "dur="); ok {
					f, err := strconv.ParseFloat(ms, 64)
					if err != nil {
						t.Fatalf("%s: Server-Timing %q: %v", what, v, err)
					}
					got[params[0]] = time.Duration(f * float64(time.Millisecond))
				}
			}
		}
	}
	wait, okWait := got["wait"]
	engine, okEngine := got["engine"]
	if !okWait || !okEngine {
		t.Fatalf("%s: Server-Timing %q says no wait or no engine time", what, h.Values("Server-Timing"))
	}
	return wait, engine
}

// TestParkedModelAnswers503WithItsReason: a model whose engine cannot load
// it is parked by the fleet after its failed starts, and a request for it
// is told why instead of waiting for ever.
func TestParkedModelAnswers503WithItsReason(t *testing.T) {
	e := mustEnv(t, Options{})
	bad := chatModel(t, "bad", ggufgen.Spec{Architecture: "foo"})
	bad.Scaling = catalog.Scaling{Min: 0, Max: 1}
	e.mustAdd(bad)

	start := time.Now()
	_, err := e.client(e.token).Chat.Completions.New(context.Background(), hello("bad", 2))
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusServiceUnavailable || ae.Code != "model_parked" {
		t.Fatalf("a parked model: %v; want a 503 model_parked", err)
	}
	if !strings.Contains(ae.Message, "bad is parked") || !strings.Contains(ae.Message, "foo") {
		t.Errorf("the 503 does not give the engine's reason: %q", ae.Message)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the refusal took %s", took)
	}
	// A second request is refused at once.
	start = time.Now()
	_, err = e.client(e.token).Chat.Completions.New(context.Background(), hello("bad", 2))
	if !errors.As(err, &ae) || ae.StatusCode != 503 || time.Since(start) > time.Second {
		t.Errorf("again: %v after %s", err, time.Since(start))
	}
}

// longModel has one slot and a context long enough that a request told to
// ignore the end of text generates for seconds: a slot held while a test
// does something else.
func longModel(t *testing.T, name string) catalog.Model {
	m := chatModel(t, name, ggufgen.Spec{})
	m.ContextLength = 4096
	m.Profiles[0].Pool, m.Profiles[0].Slots = 4096, 1
	return m
}

var long = map[string]any{"model": "long", "stream": true, "max_tokens": 100000, "ignore_eos": true,
	"messages": []map[string]string{{"role": "user", "content": "Go on for ever."}}}

// startStream sends long's streaming request and returns once its first
// event has arrived, with what cancels it.
func (e *env) startStream(body any) (context.CancelFunc, <-chan error) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/chat/completions", strings.NewReader(string(b)))
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		cancel()
		e.t.Fatalf("stream: %d", resp.StatusCode)
	}
	buf := make([]byte, 4096)
	if _, err := resp.Body.Read(buf); err != nil {
		cancel()
		e.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		defer resp.Body.Close()
		for {
			if _, err := resp.Body.Read(buf); err != nil {
				done <- err
				return
			}
		}
	}()
	return cancel, done
}

// TestQueueFullAnswers429: beyond the slots, the engine's queue (one
// request per slot) and the gateway's queue, a request is refused at once
// with Retry-After; those queued are served when the slot frees.
func TestQueueFullAnswers429(t *testing.T) {
	e := mustEnv(t, Options{MaxQueue: 1})
	e.mustAdd(longModel(t, "long"))
	e.waitServing("long", 1)
	ctx := context.Background()

	cancel, _ := e.startStream(long)
	defer cancel()
	queued := make(chan int, 2)
	for range 2 {
		go func() {
			resp, _ := e.post(ctx, "/v1/chat/completions", e.token, map[string]any{"model": "long", "max_tokens": 2,
				"messages": []map[string]string{{"role": "user", "content": "hi"}}})
			queued <- resp.StatusCode
		}()
	}
	testkit.WaitFor(t, 5*time.Second, "one request in the engine's queue and one in the gateway's", func() (bool, string) {
		inFlight, waiting := e.gw.pool("long").counts()
		return inFlight == 2 && waiting == 1, fmt.Sprintf("%d sent, %d waiting", inFlight, waiting)
	})

	_, err := e.client(e.token).Chat.Completions.New(ctx, hello("long", 2))
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusTooManyRequests || ae.Response.Header.Get("Retry-After") == "" {
		t.Fatalf("beyond the queue: %v; want 429 with Retry-After", err)
	}
	if !strings.Contains(ae.Message, "long is busy") {
		t.Errorf("429 says %q", ae.Message)
	}

	cancel() // the slot frees: the queued requests are served
	for range 2 {
		select {
		case status := <-queued:
			if status != http.StatusOK {
				t.Errorf("a queued request: %d", status)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the queued requests were not served once the slot freed")
		}
	}
}

// TestClientDisconnectFreesTheEngineSlot: a client that goes away in the
// middle of a stream stops the engine's work on it, rather than leaving it
// to generate thousands of tokens nobody reads.
func TestClientDisconnectFreesTheEngineSlot(t *testing.T) {
	e := mustEnv(t, Options{})
	e.mustAdd(longModel(t, "long"))
	e.waitServing("long", 1)

	cancel, done := e.startStream(long)
	busy := func() (bool, string) {
		rs := e.fleet.Serving("long")
		if len(rs) != 1 || rs[0].Load == nil {
			return false, "no load read"
		}
		l := rs[0].Load
		return l.SlotsBusy == 1 && l.Processing == 1, fmt.Sprintf("%+v", *l)
	}
	testkit.WaitFor(t, 3*time.Second, "the engine busy with the stream", busy)
	cancel()
	<-done
	cancelled := time.Now()
	var predicted int64
	testkit.WaitFor(t, 2*time.Second, "the engine's slot free after the client left", func() (bool, string) {
		rs := e.fleet.Serving("long")
		if len(rs) != 1 || rs[0].Load == nil || rs[0].Load.At.Before(cancelled.Add(200*time.Millisecond)) {
			return false, "no fresh load"
		}
		l := rs[0].Load
		predicted = l.PredictedTokens
		return l.SlotsBusy == 0 && l.Processing == 0, fmt.Sprintf("%+v", *l)
	})
	// Left running, it would have filled its 4096-token context.
	if predicted >= 3500 {
		t.Errorf("the engine generated %d tokens: the request was not cancelled", predicted)
	}
	e.waitCounter(t, e.gw.metrics.requests, 1, "long", "long-1", "499")
}

// deadReplicaFleet is the fleet with one more ready replica whose engine is
// gone: its port refuses connections, as an engine's does in the moment
// between its death and the fleet noticing.
type deadReplicaFleet struct {
	*fleet.Fleet
	dead fleet.Replica
}

func (f deadReplicaFleet) Serving(model string) []fleet.Replica {
	rs := f.Fleet.Serving(model)
	if len(rs) > 0 {
		rs = append(rs, f.dead)
	}
	return rs
}

// Hold lets requests go to the dead replica, which the fleet does not know
// of.
func (f deadReplicaFleet) Hold(id string, askedAt time.Time) (func(), bool) {
	if id == f.dead.ID {
		return func() {}, true
	}
	return f.Fleet.Hold(id, askedAt)
}

// TestAReplicaThatDoesNotAnswerIsAvoided: a request sent to a replica whose
// engine refuses the connection goes to another, and the next requests
// avoid it.
func TestAReplicaThatDoesNotAnswerIsAvoided(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + ln.Addr().String()
	ln.Close()
	e := mustEnv(t, Options{}, func(f *fleet.Fleet) Fleet {
		return deadReplicaFleet{f, fleet.Replica{ID: "tiny-99", Model: "tiny", Endpoint: deadURL, State: fleet.Ready, Load: &fleet.Load{Size: catalog.Size{Slots: 8}}}}
	})
	e.mustAdd(chatModel(t, "tiny", ggufgen.Spec{}))
	e.waitServing("tiny", 1)
	c := e.client(e.token)
	for i := range 6 {
		// Requests without a prompt prefix go to the least loaded: the
		// dead replica, with its 8 free slots, is the first choice.
		if _, err := c.Completions.New(context.Background(), openai.CompletionNewParams{
			Model: "tiny", Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{fmt.Sprint("count ", i)}},
			MaxTokens: openai.Int(2),
		}); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if n := e.counter(e.gw.metrics.requests, "tiny", "tiny-99", "502"); n != 1 {
		t.Errorf("the dead replica was tried %v times, want once", n)
	}
	e.waitCounter(t, e.gw.metrics.requests, 6, "tiny", "tiny-1", "200")
	if !strings.Contains(e.logs.String(), "a replica did not answer; it is avoided for a while") {
		t.Error("the failure is not logged")
	}
}

// An engine's own Server-Timing is kept beside the gateway's, and the
// gateway's is not written into the engine's answer it was copied from.
func TestRelayAddsItsTimingBesideTheEngines(t *testing.T) {
	engine := make([]string, 1, 4) // room after it, as a parsed header may have
	engine[0] = `cache;dur=1`
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Server-Timing": engine, "Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{}`))}
	w := httptest.NewRecorder()
	if _, _, err := relay(w, resp, nil, false, `wait;dur=2`); err != nil {
		t.Fatal(err)
	}
	if got := w.Header().Values("Server-Timing"); !slices.Equal(got, []string{`cache;dur=1`, `wait;dur=2`}) {
		t.Errorf("the answer's Server-Timing is %q, want the engine's and then the gateway's", got)
	}
	if spare := engine[:2][1]; spare != "" {
		t.Errorf("the gateway's timing %q was written into the engine's header", spare)
	}
}

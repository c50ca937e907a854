package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"modelserve/internal/ggufgen"
	"modelserve/internal/testkit"
)

// TestWhatAModelDoesNotServeIsRefusedInItsOwnWords: embeddings asked of a
// chat model, and a chat of an embedding model, are refused by the gateway
// with a 400 the official client raises, saying what to ask instead, not
// the engine's "start it with --embeddings"; neither counts as the model's
// failure.
func TestWhatAModelDoesNotServeIsRefusedInItsOwnWords(t *testing.T) {
	e := mustEnv(t, Options{})
	e.mustAdd(chatModel(t, "tiny", ggufgen.Spec{}))
	e.mustAdd(embedModel(t, "embed"))
	e.waitServing("tiny", 1)
	e.waitServing("embed", 1)
	c := e.client(e.token)
	ctx := context.Background()

	_, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "tiny", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello")}})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || ae.Code != "model_not_supported" ||
		!strings.Contains(ae.Message, "tiny is a chat model and makes no embeddings") || strings.Contains(ae.Message, "--embeddings") {
		t.Errorf("embeddings of a chat model: %v; want a 400 model_not_supported in modelserve's words", err)
	}
	_, err = c.Chat.Completions.New(ctx, hello("embed", 2))
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || ae.Code != "model_not_supported" ||
		!strings.Contains(ae.Message, "embed is an embedding model and generates no text: ask it at POST /v1/embeddings") {
		t.Errorf("a chat with an embedding model: %v; want a 400 model_not_supported in modelserve's words", err)
	}
	// Each still answers what it serves.
	if _, err := c.Chat.Completions.New(ctx, hello("tiny", 2)); err != nil {
		t.Errorf("tiny after the refusal: %v", err)
	}
	if res, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "embed", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello")}}); err != nil || len(res.Data) != 1 {
		t.Errorf("embed after the refusal: %+v, %v", res, err)
	}
	// A request is counted as it ends, a moment after its answer.
	testkit.WaitFor(t, 2*time.Second, "the requests counted", func() (bool, string) {
		tr := e.gw.Traffic()
		return tr["tiny"].Requests == 2 && tr["embed"].Requests == 2, ""
	})
	traffic := e.gw.Traffic()
	for _, model := range []string{"tiny", "embed"} {
		if tr := traffic[model]; tr.Requests != 2 || tr.Failed != 0 {
			t.Errorf("%s's last minute: %+v; want 2 requests, none failed", model, tr)
		}
	}
}

// TestAnswersKeepToTheModelsLongestAnswer: the catalog's longest answer
// (max_output) is the gateway's: a max_tokens or max_completion_tokens
// beyond it is refused with a sentence naming it, and a request naming
// none, by its name or an alias, plain or streamed, ends there rather than
// at the end of the context.
func TestAnswersKeepToTheModelsLongestAnswer(t *testing.T) {
	e := mustEnv(t, Options{})
	m := chatModel(t, "tiny", ggufgen.Spec{})
	m.MaxOutput, m.Aliases = 12, []string{"tiny-alias"}
	e.mustAdd(m)
	e.waitServing("tiny", 1)
	c := e.client(e.token)
	ctx := context.Background()
	// ignore_eos: the tiny model writes until its length is up, which is
	// the context's end (1024) without one.
	endless := option.WithJSONSet("ignore_eos", true)

	for _, c2 := range []struct {
		name   string
		params openai.ChatCompletionNewParams
		param  string
	}{
		{"max_tokens", hello("tiny", 13), "max_tokens"},
		{"max_completion_tokens", openai.ChatCompletionNewParams{Model: "tiny", Messages: hello("tiny", 1).Messages, MaxCompletionTokens: openai.Int(500)}, "max_completion_tokens"},
	} {
		_, err := c.Chat.Completions.New(ctx, c2.params)
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || ae.Param != c2.param ||
			!strings.Contains(ae.Message, "tiny's longest answer, 12 tokens: ask for 12 or fewer") {
			t.Errorf("%s beyond the limit: %v; want a 400 naming the limit", c2.name, err)
		}
	}

	within, err := c.Chat.Completions.New(ctx, hello("tiny", 5), endless)
	if err != nil || within.Usage.CompletionTokens != 5 {
		t.Errorf("max_tokens 5: %+v, %v; want 5 tokens", within.Usage, err)
	}
	for _, name := range []string{"tiny", "tiny-alias"} {
		p := hello(name, 1)
		p = openai.ChatCompletionNewParams{Model: name, Messages: p.Messages, Temperature: p.Temperature, Seed: p.Seed}
		res, err := c.Chat.Completions.New(ctx, p, endless)
		if err != nil || res.Usage.CompletionTokens != 12 {
			t.Errorf("%s with no max_tokens: %+v, %v; want the longest answer, 12 tokens", name, res.Usage, err)
		}
	}
	p := openai.ChatCompletionNewParams{Model: "tiny", Messages: hello("tiny", 1).Messages,
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}
	stream := c.Chat.Completions.NewStreaming(ctx, p, endless)
	var completion int64
	for stream.Next() {
		if u := stream.Current().Usage; u.CompletionTokens > 0 {
			completion = u.CompletionTokens
		}
	}
	if err := stream.Err(); err != nil || completion != 12 {
		t.Errorf("a stream with no max_tokens: %d tokens, %v; want 12", completion, err)
	}
	if listed, err := c.Models.Get(ctx, "tiny"); err != nil || !strings.Contains(listed.JSON.ExtraFields["modelserve"].Raw(), `"max_output":12`) {
		t.Errorf("/v1/models/tiny does not say its longest answer: %+v, %v", listed, err)
	}
}

// TestEveryRouteThatGeneratesKeepsToTheLongestAnswer: llama-server
// generates on OpenAI's Responses API and Anthropic's Messages API too, by
// their own length fields, and ran to the end of the context there when
// the catch-all forwarded them as they came. Each keeps to max_output as
// the chat does, a route the gateway does not know is refused rather than
// passed on, and a length sent as null does not undo the one given.
func TestEveryRouteThatGeneratesKeepsToTheLongestAnswer(t *testing.T) {
	e := mustEnv(t, Options{})
	m := chatModel(t, "tiny", ggufgen.Spec{})
	m.MaxOutput = 12
	e.mustAdd(m)
	e.waitServing("tiny", 1)
	ctx := context.Background()
	msgs := []map[string]string{{"role": "user", "content": "hi"}}

	// usage.output_tokens on both, as each API names it
	// (completion_tokens on the chat).
	var answer struct {
		Usage struct {
			Output     int `json:"output_tokens"`
			Completion int `json:"completion_tokens"`
		} `json:"usage"`
	}
	for _, c := range []struct {
		name, path string
		body       map[string]any
	}{
		{"a chat whose max_tokens is null", "/v1/chat/completions", map[string]any{"model": "tiny", "messages": msgs, "max_tokens": nil, "ignore_eos": true}},
		{"a response with no length", "/v1/responses", map[string]any{"model": "tiny", "input": "hi", "ignore_eos": true}},
		{"a response whose length is null", "/v1/responses", map[string]any{"model": "tiny", "input": "hi", "max_output_tokens": nil, "ignore_eos": true}},
		{"a message with no max_tokens", "/v1/messages", map[string]any{"model": "tiny", "messages": msgs, "ignore_eos": true}},
		{"a message whose max_tokens is null", "/v1/messages", map[string]any{"model": "tiny", "messages": msgs, "max_tokens": nil, "ignore_eos": true}},
		// The engine reads no n_predict on /v1/messages: naming one does
		// not stand for a length there.
		{"a message with only n_predict", "/v1/messages", map[string]any{"model": "tiny", "messages": msgs, "n_predict": 5, "ignore_eos": true}},
	} {
		resp, body := e.post(ctx, c.path, e.token, c.body)
		answer.Usage.Output, answer.Usage.Completion = 0, 0
		if err := json.Unmarshal(body, &answer); resp.StatusCode != http.StatusOK || err != nil || answer.Usage.Output+answer.Usage.Completion != 12 {
			t.Errorf("%s: %d, %d tokens (%.300s); want tiny's longest answer, 12", c.name, resp.StatusCode, answer.Usage.Output+answer.Usage.Completion, body)
		}
	}
	for _, c := range []struct {
		name, path, param string
		body              map[string]any
	}{
		{"max_output_tokens beyond it", "/v1/responses", "max_output_tokens", map[string]any{"model": "tiny", "input": "hi", "max_output_tokens": 500}},
		{"a response's n_predict beyond it", "/v1/responses", "n_predict", map[string]any{"model": "tiny", "input": "hi", "max_output_tokens": 5, "n_predict": 500}},
		{"a message's max_tokens beyond it", "/v1/messages", "max_tokens", map[string]any{"model": "tiny", "messages": msgs, "max_tokens": 500}},
	} {
		resp, body := e.post(ctx, c.path, e.token, c.body)
		if ae := apiErr(t, body); resp.StatusCode != http.StatusBadRequest || ae.Code != "max_tokens_too_large" || ae.Param == nil || *ae.Param != c.param ||
			!strings.Contains(ae.Message, "tiny's longest answer, 12 tokens: ask for 12 or fewer") {
			t.Errorf("%s: %d %s; want a 400 naming the limit", c.name, resp.StatusCode, body)
		}
	}
	// Within it, as asked.
	resp, body := e.post(ctx, "/v1/messages", e.token, map[string]any{"model": "tiny", "messages": msgs, "max_tokens": 5, "ignore_eos": true})
	if err := json.Unmarshal(body, &answer); resp.StatusCode != http.StatusOK || err != nil || answer.Usage.Output != 5 {
		t.Errorf("a message with max_tokens 5: %d %.300s; want 5 tokens", resp.StatusCode, body)
	}
	// Counting a prompt generates nothing, and is passed on.
	if resp, body := e.post(ctx, "/v1/messages/count_tokens", e.token, map[string]any{"model": "tiny", "messages": msgs}); resp.StatusCode != http.StatusOK {
		t.Errorf("count_tokens: %d %s; want the engine's count", resp.StatusCode, body)
	}
	// The engine's routes the gateway does not know are refused, whatever
	// they do.
	for _, path := range []string{"/v1/chat/completions/control", "/v1/audio/transcriptions", "/v1/streams/lookup"} {
		resp, body := e.post(ctx, path, e.token, map[string]any{"model": "tiny", "messages": msgs})
		if ae := apiErr(t, body); resp.StatusCode != http.StatusNotFound || ae.Code != "unknown_url" ||
			!strings.Contains(ae.Message, "the gateway does not forward POST "+path+": it forwards /v1/chat/completions, ") {
			t.Errorf("POST %s: %d %s; want a 404 in the gateway's words", path, resp.StatusCode, body)
		}
	}
}

// TestAPromptLongerThanTheContextIsRefusedInOpenAIsWords: llama-server
// refuses a prompt longer than a slot's context with a 400 of its own type
// ("try increasing it", which no client can); the gateway answers
// OpenAI's context_length_exceeded instead, which the official client
// raises with its code, naming the limit, on every route that reads a
// prompt. It is the client's error, not the model's failure.
func TestAPromptLongerThanTheContextIsRefusedInOpenAIsWords(t *testing.T) {
	e := mustEnv(t, Options{})
	e.mustAdd(chatModel(t, "tiny", ggufgen.Spec{}))
	e.waitServing("tiny", 1)
	c := e.client(e.token)
	ctx := context.Background()
	long := strings.Repeat("hello world ", 1000)

	_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "tiny", MaxTokens: openai.Int(2),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(long)}})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || ae.Code != "context_length_exceeded" ||
		ae.Type != "invalid_request_error" || ae.Param != "messages" ||
		!regexp.MustCompile(`^the prompt is \d+ tokens, and tiny reads at most 1024 tokens a request: shorten the prompt`).MatchString(ae.Message) {
		t.Errorf("a chat longer than the context: %v; want a 400 context_length_exceeded naming 1024 tokens", err)
	}
	for _, r := range []struct {
		path, param string
		body        map[string]any
	}{
		{"/v1/completions", "prompt", map[string]any{"model": "tiny", "prompt": long, "max_tokens": 2}},
		{"/v1/responses", "input", map[string]any{"model": "tiny", "input": long, "max_output_tokens": 2}},
		{"/v1/messages", "messages", map[string]any{"model": "tiny", "max_tokens": 2, "messages": []map[string]string{{"role": "user", "content": long}}}},
	} {
		resp, body := e.post(ctx, r.path, e.token, r.body)
		if got := apiErr(t, body); resp.StatusCode != http.StatusBadRequest || got.Code != "context_length_exceeded" ||
			got.Param == nil || *got.Param != r.param || !strings.Contains(got.Message, "tiny reads at most 1024 tokens a request") {
			t.Errorf("%s: %d %s; want a 400 context_length_exceeded naming 1024 tokens", r.path, resp.StatusCode, body)
		}
	}
	// A prompt that fits is answered on the same connection after them.
	if _, err := c.Chat.Completions.New(ctx, hello("tiny", 2)); err != nil {
		t.Errorf("a chat that fits, after them: %v", err)
	}
	testkit.WaitFor(t, 2*time.Second, "the requests counted", func() (bool, string) {
		return e.gw.Traffic()["tiny"].Requests == 5, ""
	})
	if tr := e.gw.Traffic()["tiny"]; tr.Failed != 0 {
		t.Errorf("tiny's last minute: %+v; want none failed", tr)
	}
}

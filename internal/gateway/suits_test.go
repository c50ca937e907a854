package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"modelserve/internal/ggufgen"
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
	waitFor(t, 2*time.Second, "the requests counted", func() (bool, string) {
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

// Package chat is the requests modelserve itself sends through its
// gateway, and the replies it reads back: the job's smoke test, the eval
// runner and the console's playground.
//
// Each of the three once wrote its own request (a map here, a struct
// there) and its own struct to read the choices from, and they drifted:
// one sent a seed, one read the usage, one read streamed deltas. They
// speak the OpenAI API that llama.cpp and vLLM serve; this package is
// that dialect, said once.
package chat

import (
	"encoding/json"
	"errors"
)

// ErrNoAnswer is wrapped by the error of a request modelserve sent itself
// when no replica answered at all (the connection refused or cut before
// an answer began): not yet, rather than no, for a replica whose address
// is still being routed. The gateway wraps it and its callers ask for it
// here, so that neither needs the other.
var ErrNoAnswer = errors.New("no replica answered")

// ErrLoading is wrapped by the error of a request modelserve sent itself
// when the engine answered that it is still loading the model
// (llama-server's 503 "Loading model"): not yet, rather than no, for a
// replica the fleet offered as it became ready. LoadingMessage is the
// engine's own words for it.
var ErrLoading = errors.New("the engine is still loading the model")

// LoadingMessage is the error message llama-server answers every route
// but its health and model list with, 503, while it loads the model.
const LoadingMessage = "Loading model"

// The gateway's routes the requests go to.
const (
	CompletionsPath = "/v1/chat/completions"
	EmbeddingsPath  = "/v1/embeddings"
)

// Request is a chat completion request. Temperature and Seed are
// pointers: 0 is a temperature to send, not one to leave out.
type Request struct {
	Model         string         `json:"model"`
	Messages      []Message      `json:"messages"`
	MaxTokens     int            `json:"max_tokens,omitempty"`
	Temperature   *float64       `json:"temperature,omitempty"`
	Seed          *int           `json:"seed,omitempty"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *StreamOptions `json:"stream_options,omitempty"`
}

// StreamOptions asks a streamed answer to end with its usage, for a
// reply's tokens per second.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Message is one turn of a conversation.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// User is a message from the user.
func User(text string) Message { return Message{Role: "user", Content: text} }

// System is the system prompt.
func System(text string) Message { return Message{Role: "system", Content: text} }

// Deterministic is a request that gives the same answer on every run:
// temperature 0 and a fixed seed, so an answer that changes is the
// model's, not chance's.
func Deterministic(model string, maxTokens, seed int, msgs ...Message) Request {
	t := 0.0
	return Request{Model: model, Messages: msgs, MaxTokens: maxTokens, Temperature: &t, Seed: &seed}
}

// Body is the request as JSON.
func (r Request) Body() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // strings, numbers and slices of them always encode
	}
	return b
}

// Completion is a chat answer, whole or one chunk of a streamed one.
type Completion struct {
	Choices []struct {
		Message Message `json:"message"`
		Delta   Message `json:"delta"`
	} `json:"choices"`
	Usage *Usage `json:"usage"`
}

// Usage is what the engine counted; nil when an answer did not say.
type Usage struct {
	CompletionTokens int `json:"completion_tokens"`
}

// ReadCompletion reads b as a completion; false when it is not one (not
// JSON, or no choices, as in an error's body).
func ReadCompletion(b []byte) (Completion, bool) {
	var c Completion
	if err := json.Unmarshal(b, &c); err != nil || len(c.Choices) == 0 {
		return c, false
	}
	return c, true
}

// Text is the answer's text: the first choice's message, or its delta in
// a streamed chunk.
func (c Completion) Text() string {
	if len(c.Choices) == 0 {
		return ""
	}
	return c.Choices[0].Message.Content + c.Choices[0].Delta.Content
}

// EmbeddingRequest asks for the embedding of each input.
type EmbeddingRequest struct {
	Model string
	Input []string
}

// Embed is the request for the embeddings of texts, in order.
func Embed(model string, texts ...string) EmbeddingRequest {
	return EmbeddingRequest{Model: model, Input: texts}
}

// Body is the request as JSON: one text as a string, as a client would
// send it, several as a list.
func (r EmbeddingRequest) Body() []byte {
	var input any = r.Input
	if len(r.Input) == 1 {
		input = r.Input[0]
	}
	b, err := json.Marshal(struct {
		Model string `json:"model"`
		Input any    `json:"input"`
	}{r.Model, input})
	if err != nil {
		panic(err)
	}
	return b
}

// Embeddings is an embedding answer: a vector for each input.
type Embeddings struct {
	Data []struct {
		Index     int       `json:"index"`
		Embedding []float64 `json:"embedding"`
	} `json:"data"`
}

// ReadEmbeddings reads b as embeddings; false when it is not JSON or
// holds no vector.
func ReadEmbeddings(b []byte) (Embeddings, bool) {
	var e Embeddings
	if err := json.Unmarshal(b, &e); err != nil || len(e.Data) == 0 || len(e.Data[0].Embedding) == 0 {
		return e, false
	}
	return e, true
}

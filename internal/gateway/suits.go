package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"modelserve/catalog"
)

// A request the model cannot serve is refused here, in modelserve's words,
// before a replica is woken for it: asked of the engine, embeddings of a
// chat model came back as llama-server's 501 "start it with --embeddings"
// (an instruction no client can follow, counted as the replica's
// failure), and an answer with no length ran until the context was full.

// routes are the engine's POST /v1/ routes the gateway forwards, and what
// each is. A route not here is refused, not passed on: llama-server
// generates on routes an OpenAI client never names (its Anthropic
// /v1/messages, its Responses API), and one the gateway did not know would
// run uncapped until the context was full.
var routes = map[string]route{
	"/v1/chat/completions": {lengths: openAILengths, prompt: "messages"},
	"/v1/completions":      {lengths: openAILengths, prompt: "prompt"},
	// OpenAI's Responses API names its length max_output_tokens; the
	// engine reads the chat's fields there too.
	"/v1/responses": {lengths: append([]string{"max_output_tokens"}, openAILengths...), prompt: "input"},
	// Anthropic's Messages API: max_tokens, which its clients always send.
	// The engine reads no other field there (n_predict is ignored).
	"/v1/messages":   {lengths: []string{"max_tokens"}, prompt: "messages"},
	"/v1/embeddings": {embeds: true, prompt: "input"},
	"/v1/rerank":     {prompt: "query"},
	"/v1/reranking":  {prompt: "query"},
	// Counting a prompt's tokens generates nothing.
	"/v1/messages/count_tokens":         {prompt: "messages"},
	"/v1/chat/completions/input_tokens": {prompt: "messages"},
	"/v1/responses/input_tokens":        {prompt: "input"},
}

// openAILengths are the fields that bound an answer's length on OpenAI's
// chat and text completions as llama-server reads them: OpenAI's two and
// its own n_predict, which wins over them.
var openAILengths = []string{"max_tokens", "max_completion_tokens", "n_predict"}

// A route is one of routes.
type route struct {
	// lengths are the fields the engine bounds a generated answer's length
	// by on this route, each held to the model's longest answer; the first
	// is set when a request names none. None: it generates nothing.
	lengths []string
	// embeds says it answers with embeddings.
	embeds bool
	// prompt is the field the prompt is in, named by a refusal of it.
	prompt string
}

func (r route) generates() bool { return len(r.lengths) > 0 }

// routeNames lists routes for a refusal, in a stable order.
func routeNames() string {
	names := make([]string, 0, len(routes))
	for p := range routes {
		names = append(names, p)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// suit checks req, sent to path, against what m serves, and gives a
// generating request that names no length m's longest answer
// (catalog.Model.MaxOutput) when that is shorter than a request's context
// (ContextLength): the engine would otherwise generate until the context
// is full. It returns the body to send, req's fields updated alike.
func suit(path string, m catalog.Model, req *request, body []byte) ([]byte, *apiError) {
	rt, known := routes[path]
	if !known {
		return nil, &apiError{status: http.StatusNotFound, Type: "invalid_request_error", Code: "unknown_url",
			Message: "the gateway does not forward POST " + path + ": it forwards " + routeNames()}
	}
	embeds := m.Capabilities.Embeddings
	switch {
	case rt.embeds && !embeds:
		return nil, unsuited(m.Name + " is a chat model and makes no embeddings: ask it at POST /v1/chat/completions, " +
			`or ask a model GET /v1/models marks "embeddings": true for embeddings`)
	case rt.generates() && embeds:
		return nil, unsuited(m.Name + " is an embedding model and generates no text: ask it at POST /v1/embeddings, " +
			"or ask a chat model GET /v1/models lists for " + path)
	}
	// llama.cpp answers tools that are not a list with a 500, as if it had
	// failed.
	if raw, ok := req.fields["tools"]; ok && len(raw) > 0 && raw[0] != '[' && string(raw) != "null" {
		param := "tools"
		return nil, &apiError{status: 400, Type: "invalid_request_error", Code: "invalid_type", Param: &param,
			Message: `"tools" is not a list: send it as a JSON array of tool definitions, or leave it out`}
	}
	limit := m.MaxOutput
	if !rt.generates() || limit <= 0 {
		return body, nil
	}
	named := false
	for _, f := range rt.lengths {
		raw, ok := req.fields[f]
		if !ok || string(raw) == "null" {
			continue
		}
		named = true
		var n json.Number
		if json.Unmarshal(raw, &n) != nil {
			continue // not a number: the engine says so
		}
		// n_predict -1 is llama.cpp's "until the context is full".
		if v, err := n.Int64(); err == nil && v <= int64(limit) && v >= 0 {
			continue
		}
		param := f
		return nil, &apiError{status: 400, Type: "invalid_request_error", Code: "max_tokens_too_large", Param: &param,
			Message: f + " " + string(raw) + " is more than " + m.Name + "'s longest answer, " + strconv.Itoa(limit) +
				" tokens: ask for " + strconv.Itoa(limit) + " or fewer, or leave it out to have that many at most"}
	}
	if named || (m.ContextLength > 0 && limit >= m.ContextLength) {
		// Named, and checked; or the engine stops at the end of a
		// request's context before the limit anyway.
		return body, nil
	}
	n, field := strconv.Itoa(limit), rt.lengths[0]
	req.fields[field] = json.RawMessage(n)
	// The field goes last, the body otherwise as it came: no decoding and
	// encoding again of a long prompt. Last, since the engine reads the
	// last of a name, as members does: a "max_tokens": null the client
	// sent (not a length, so not named) would otherwise win over it, and
	// the engine reads null as no bound. The body is a JSON object with a
	// model in it, so it ends with "}" once its spaces are cut.
	head := bytes.TrimRight(body, " \t\r\n")
	head = head[:len(head)-1]
	out := make([]byte, 0, len(head)+len(field)+len(n)+8)
	out = append(append(append(append(append(append(out, head...), `,"`...), field...), `":`...), n...), '}')
	return out, nil
}

func unsuited(msg string) *apiError {
	param := "model"
	return &apiError{status: 400, Type: "invalid_request_error", Code: "model_not_supported", Param: &param, Message: msg}
}

package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"

	"modelserve/catalog"
)

// A request the model cannot serve is refused here, in modelserve's words,
// before a replica is woken for it: asked of the engine, embeddings of a
// chat model came back as llama-server's 501 "start it with --embeddings"
// (an instruction no client can follow, counted as the replica's
// failure), and an answer with no length ran until the context was full.

// generating are the routes whose answer the engine generates, token by
// token; embeddingRoutes those that embed.
var (
	generating      = map[string]bool{"/v1/chat/completions": true, "/v1/completions": true}
	embeddingRoutes = map[string]bool{"/v1/embeddings": true}
)

// lengthFields are the fields that bound an answer's length: OpenAI's two
// and llama.cpp's own.
var lengthFields = []string{"max_tokens", "max_completion_tokens", "n_predict"}

// suit checks req, sent to path, against what m serves, and gives a
// generating request that names no length m's longest answer
// (catalog.Model.MaxOutput) when that is shorter than a request's context
// (ContextLength): the engine would otherwise generate until the context
// is full. It returns the body to send, req's fields updated alike.
func suit(path string, m catalog.Model, req *request, body []byte) ([]byte, *apiError) {
	embeds := m.Capabilities.Embeddings
	switch {
	case embeddingRoutes[path] && !embeds:
		return nil, unsuited(m.Name + " is a chat model and makes no embeddings: ask it at POST /v1/chat/completions, " +
			`or ask a model GET /v1/models marks "embeddings": true for embeddings`)
	case generating[path] && embeds:
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
	if !generating[path] || limit <= 0 {
		return body, nil
	}
	named := false
	for _, f := range lengthFields {
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
	n := strconv.Itoa(limit)
	req.fields["max_tokens"] = json.RawMessage(n)
	// The field goes first, the body otherwise as it came: no decoding and
	// encoding again of a long prompt. The body is a JSON object (it was
	// parsed as one), so it begins with "{" once its spaces are cut.
	rest := bytes.TrimLeft(body, " \t\r\n")[1:]
	out := make([]byte, 0, len(body)+len(n)+16)
	out = append(append(append(out, `{"max_tokens":`...), n...), ',')
	return append(out, rest...), nil
}

func unsuited(msg string) *apiError {
	param := "model"
	return &apiError{status: 400, Type: "invalid_request_error", Code: "model_not_supported", Param: &param, Message: msg}
}

package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
)

// A prompt longer than a slot's context is the client's to shorten, and
// the client is told so in OpenAI's words (code context_length_exceeded,
// which clients and agents look for to trim a conversation), naming the
// limit. llama-server's own answer is a 400 of a type no OpenAI client
// knows, which tells the client to "try increasing" a context only the
// operator sets.

// engineErrorMax bounds how much of a 400 is read to tell whether it is the
// engine's context refusal: that answer is a line of JSON.
const engineErrorMax = 4 << 10

// contextExceeded turns the engine's refusal of a prompt longer than its
// slot's context (type exceed_context_size_error, with n_prompt_tokens and
// n_ctx) into the gateway's, for model, asked at path. Any other answer is
// left to be relayed as it is, its bytes all there.
func contextExceeded(resp *http.Response, model, path string) {
	if resp.StatusCode != http.StatusBadRequest {
		return
	}
	head, err := io.ReadAll(io.LimitReader(resp.Body, engineErrorMax))
	var got struct {
		Error struct {
			Type   string `json:"type"`
			Prompt int    `json:"n_prompt_tokens"`
			Ctx    int    `json:"n_ctx"`
		} `json:"error"`
	}
	if err != nil || json.Unmarshal(head, &got) != nil || got.Error.Type != "exceed_context_size_error" || got.Error.Ctx <= 0 {
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
		return
	}
	param := routes[path].prompt
	aerr := &apiError{status: http.StatusBadRequest, Type: "invalid_request_error", Code: "context_length_exceeded", Param: &param,
		Message: "the prompt is " + strconv.Itoa(got.Error.Prompt) + " tokens, and " + model + " reads at most " +
			strconv.Itoa(got.Error.Ctx) + " tokens a request: shorten the prompt (or the conversation), " +
			"or ask a model with a longer context (GET /v1/models gives each one's)"}
	b, _ := json.Marshal(struct {
		Error *apiError `json:"error"`
	}{aerr})
	b = append(b, '\n')
	resp.Body = readCloser{bytes.NewReader(b), resp.Body}
	resp.ContentLength = int64(len(b))
	resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
	resp.Header.Set("Content-Type", "application/json")
}

// readCloser reads from one reader and closes another: an answer's body
// partly read already, or replaced, still closes the connection's.
type readCloser struct {
	io.Reader
	io.Closer
}

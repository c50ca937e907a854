package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/jobs"
)

// TestGatewayServesWhatAJobServed is the path a new user takes: a job serves
// a repository as a model loaded on demand, an operator makes a token for
// that model alone with the CLI, and the official OpenAI client lists and
// chats with it on modelserve's own address, the model loading for the
// first request.
func TestGatewayServesWhatAJobServed(t *testing.T) {
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Tiny-Llama-GGUF", "Tiny-Llama-Q4_K_M.gguf", ggufgen.Spec{ContextLength: 8192})
	data := madeDataDir(t)
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: data, HFEndpoint: hub.URL()})

	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Tiny-Llama-GGUF", "replicas": 0, "context_length": 2048, "ctx_pool": 2048}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d %+v", code, job)
	}
	seen := s.watch(job.ID, 2*time.Minute)
	if last := seen[len(seen)-1]; last.State != jobs.Done || last.Model != "tiny-llama" {
		t.Fatalf("job ended %s (%s) serving %q", last.State, last.Error, last.Model)
	}

	// A token for the gateway and that model alone, made while the server
	// runs.
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"token", "create", "--data", data, "--models", "tiny-llama", "app"},
		func(string) string { return "" }, nil, &out, &errb); err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(out.String())

	client := openai.NewClient(option.WithBaseURL(s.base+"/v1/"), option.WithAPIKey(tok), option.WithMaxRetries(0),
		option.WithRequestTimeout(2*time.Minute))
	ctx := context.Background()
	page, err := client.Models.List(ctx)
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != "tiny-llama" {
		t.Fatalf("models: %+v, %v; want tiny-llama", page, err)
	}
	res, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "tiny-llama", MaxTokens: openai.Int(8),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
	})
	if err != nil {
		t.Fatalf("chat through the gateway: %v", err)
	}
	if res.Model != "tiny-llama" || len(res.Choices) != 1 || res.Choices[0].Message.Content == "" || res.Usage.CompletionTokens == 0 {
		t.Errorf("chat answer: %+v", res)
	}

	// The token is refused where it was not meant to go.
	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound || !strings.Contains(ae.Message, `"gpt-4o"`) {
		t.Errorf("an unknown model: %v, want a 404 naming it", err)
	}
	req, _ := http.NewRequest(http.MethodGet, s.base+"/api/v1/jobs", nil)
	req.Header.Set("Authorization", "bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "for the gateway (/v1/) only") {
		t.Errorf("a gateway token on the API: %d %s; want 403 saying why", resp.StatusCode, body)
	}

	// The server's own token reaches the gateway too.
	if code := s.do("GET", "/v1/models", nil, nil); code != http.StatusOK {
		t.Errorf("GET /v1/models with an API token: %d", code)
	}

	resp, err = http.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`modelserve_gateway_requests_total{model="tiny-llama",replica="tiny-llama-`,
		`modelserve_gateway_time_to_first_token_seconds_count{model="tiny-llama"`,
		`modelserve_gateway_tokens_total{kind="completion",model="tiny-llama"`,
	} {
		if !strings.Contains(string(text), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

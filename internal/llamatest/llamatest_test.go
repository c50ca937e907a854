package llamatest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode"

	"modelserve/internal/ggufgen"
)

// threads is passed to every engine: on a busy two-core machine llama.cpp
// with two threads (or its default, one per core) generated the tiny model
// tens to hundreds of times slower than with one.
var threads = []string{"-t", "1"}

// readyTimeout bounds a load: the library takes about a second to start and
// the tiny model tens of milliseconds, more when other tests share the CPU.
const readyTimeout = 30 * time.Second

var client = &http.Client{Timeout: 30 * time.Second}

// writeModel writes a ggufgen model into the test's temporary directory.
func writeModel(t *testing.T, name string, spec ggufgen.Spec) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := ggufgen.WriteFile(path, spec); err != nil {
		t.Fatalf("writing %s: %v", name, err)
	}
	return path
}

func tinyModel(t *testing.T) string { return writeModel(t, "tiny.gguf", ggufgen.Spec{}) }

// startReady starts an engine on the tiny model (unless args name one) and
// waits until it answers /health.
func startReady(t *testing.T, args ...string) string {
	t.Helper()
	url, _ := Start(t, append(args, threads...)...)
	WaitReady(t, url, readyTimeout)
	return url
}

// call sends a request and returns the status and body.
func call(t *testing.T, method, url, body string, header map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, url, err)
	}
	return resp.StatusCode, data
}

// mustAnswer checks status and, when want is not empty, the exact body.
func mustAnswer(t *testing.T, method, url, body string, header map[string]string, wantStatus int, wantBody string) []byte {
	t.Helper()
	status, got := call(t, method, url, body, header)
	if status != wantStatus {
		t.Fatalf("%s %s: status %d, want %d; body %s", method, url, status, wantStatus, got)
	}
	if wantBody != "" && string(got) != wantBody {
		t.Fatalf("%s %s: body\n%s\nwant\n%s", method, url, got, wantBody)
	}
	return got
}

const (
	loadingBody     = `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`
	invalidKeyBody  = `{"error":{"code":401,"message":"Invalid API Key","type":"authentication_error"}}`
	noEmbeddingBody = "{\"error\":{\"code\":501,\"message\":\"This server does not support embeddings. Start it with `--embeddings`\",\"type\":\"not_supported_error\"}}"
	okBody          = `{"status":"ok"}`
	chatRequest     = `{"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello."}],"max_tokens":16}`
)

// runToExit runs the engine to its end, bounded, and returns its exit code
// and output.
func runToExit(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := Command(t, args...)
	cmd.Env = append(cmd.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Stop(cmd) })
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("waiting for the engine: %v", err)
		}
		return cmd.ProcessState.ExitCode(), out.String()
	case <-time.After(readyTimeout):
		Stop(cmd)
		<-done
		t.Fatalf("the engine did not exit within %s; output:\n%s", readyTimeout, out.String())
	}
	return 0, ""
}

func TestCommandLineErrors(t *testing.T) {
	t.Parallel()
	model := tinyModel(t)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"-m", model, "--no-such-flag"}, "error: invalid argument: --no-such-flag\n"},
		{"missing value", []string{"-m", model, "-c"}, `error while handling argument "-c": expected value for argument`},
		{"not a number", []string{"-m", model, "--parallel", "two"}, `error while handling argument "--parallel": stoi`},
		{"fit takes on or off", []string{"-m", model, "--fit", "yes"}, `unknown value for --fit: 'yes'`},
		{"no model", []string{"--port", "0"}, "error: no model given"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out := runToExit(t, nil, tc.args...)
			if code != 1 {
				t.Errorf("exit code %d, want 1; output:\n%s", code, out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("output %q does not contain %q", out, tc.want)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	code, out := runToExit(t, nil, "--version")
	if code != 0 {
		t.Fatalf("exit code %d, want 0; output:\n%s", code, out)
	}
	if !regexp.MustCompile(`(?m)^version: \d+ \(llamatest node-llama-cpp 3\.21\.1\)$`).MatchString(out) {
		t.Fatalf("--version printed %q, want a line like llama.cpp's naming the test engine", out)
	}
}

func TestLoadingThenReady(t *testing.T) {
	t.Parallel()
	model := tinyModel(t)
	url, _, _ := start(t, []string{"LLAMATEST_LOAD_DELAY_MS=2000"}, append([]string{"-m", model}, threads...)...)
	waitListening(t, url)

	mustAnswer(t, "GET", url+"/health", "", nil, 503, loadingBody)
	mustAnswer(t, "GET", url+"/v1/health", "", nil, 503, loadingBody)
	mustAnswer(t, "POST", url+"/v1/chat/completions", chatRequest, nil, 503, loadingBody)
	mustAnswer(t, "GET", url+"/props", "", nil, 503, loadingBody)
	// The model list answers while loading, without the model's details.
	var models modelList
	decode(t, mustAnswer(t, "GET", url+"/v1/models", "", nil, 200, ""), &models)
	if len(models.Data) != 1 || models.Data[0].ID != "tiny.gguf" || models.Data[0].Meta != nil {
		t.Fatalf("/v1/models while loading = %+v, want one model named after its file, meta null", models)
	}

	WaitReady(t, url, readyTimeout)
	mustAnswer(t, "GET", url+"/health", "", nil, 200, okBody)
	decode(t, mustAnswer(t, "GET", url+"/v1/models", "", nil, 200, ""), &models)
	if m := models.Data[0]; m.OwnedBy != "llamacpp" || m.Meta == nil || m.Meta.NCtxTrain != 4096 || m.Meta.NEmbd != 64 {
		t.Fatalf("/v1/models when ready = %+v, want owned_by llamacpp and the model's meta", m)
	}
}

// waitListening waits until the engine accepts connections, whatever it
// answers.
func waitListening(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for {
		resp, err := client.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the engine at %s never listened: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type modelList struct {
	Object string `json:"object"`
	Data   []struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		OwnedBy string `json:"owned_by"`
		Meta    *struct {
			NCtxTrain int `json:"n_ctx_train"`
			NEmbd     int `json:"n_embd"`
			NVocab    int `json:"n_vocab"`
		} `json:"meta"`
	} `json:"data"`
}

func decode(t *testing.T, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("decoding %s: %v", data, err)
	}
}

func TestAPIKey(t *testing.T) {
	t.Parallel()
	url := startReady(t, "-m", tinyModel(t), "--api-key", "s3cret")

	// Health and the model list stay open, as in llama-server.
	mustAnswer(t, "GET", url+"/health", "", nil, 200, okBody)
	mustAnswer(t, "GET", url+"/v1/models", "", nil, 200, "")
	for name, header := range map[string]map[string]string{
		"missing": nil,
		"wrong":   {"Authorization": "Bearer nope"},
	} {
		t.Run(name, func(t *testing.T) {
			mustAnswer(t, "POST", url+"/v1/chat/completions", chatRequest, header, 401, invalidKeyBody)
			mustAnswer(t, "GET", url+"/props", "", header, 401, invalidKeyBody)
		})
	}
	mustAnswer(t, "POST", url+"/v1/chat/completions", chatRequest, map[string]string{"Authorization": "Bearer s3cret"}, 200, "")
}

type chatAnswer struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int    `json:"index"`
		FinishReason string `json:"finish_reason"`
		Message      struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
	Timings struct {
		PromptN            int     `json:"prompt_n"`
		PromptMS           float64 `json:"prompt_ms"`
		PredictedN         int     `json:"predicted_n"`
		PredictedMS        float64 `json:"predicted_ms"`
		PredictedPerSecond float64 `json:"predicted_per_second"`
	} `json:"timings"`
}

func TestChatCompletion(t *testing.T) {
	t.Parallel()
	url := startReady(t, "-m", tinyModel(t), "-a", "tiny-chat", "-c", "1024", "-np", "2")

	var longest string
	for _, maxTokens := range []int{1, 16} {
		body := `{"messages":[{"role":"user","content":"Say hello."}],"temperature":0,"max_tokens":` + strconv.Itoa(maxTokens) + `}`
		var a chatAnswer
		decode(t, mustAnswer(t, "POST", url+"/v1/chat/completions", body, nil, 200, ""), &a)
		longest = a.Choices[0].Message.Content
		t.Logf("max_tokens %d: %q, %d tokens at %.0f tokens/s", maxTokens, a.Choices[0].Message.Content, a.Usage.CompletionTokens, a.Timings.PredictedPerSecond)
		if a.Object != "chat.completion" || a.Model != "tiny-chat" || !strings.HasPrefix(a.ID, "chatcmpl-") || a.Created == 0 {
			t.Errorf("answer header = %q %q %q %d, want chat.completion from tiny-chat", a.Object, a.Model, a.ID, a.Created)
		}
		if len(a.Choices) != 1 || a.Choices[0].Message.Role != "assistant" {
			t.Fatalf("choices = %+v, want one assistant message", a.Choices)
		}
		c := a.Choices[0]
		if c.FinishReason != "stop" && c.FinishReason != "length" {
			t.Errorf("finish_reason %q, want stop or length", c.FinishReason)
		}
		if c.Message.Content == "" {
			t.Errorf("content is empty after %d generated tokens", a.Usage.CompletionTokens)
		}
		u := a.Usage
		if u.CompletionTokens <= 0 || u.CompletionTokens > maxTokens {
			t.Errorf("completion_tokens %d, want 1..%d", u.CompletionTokens, maxTokens)
		}
		if u.PromptTokens <= 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
			t.Errorf("usage %+v does not add up", u)
		}
		if a.Timings.PromptN != u.PromptTokens || a.Timings.PredictedN != u.CompletionTokens || a.Timings.PredictedPerSecond <= 0 {
			t.Errorf("timings %+v disagree with usage %+v", a.Timings, u)
		}
	}

	// A stop text ends the answer before it. Greedy sampling repeats the
	// answer above, so a letter from its middle is a stop text it meets.
	stop := ""
	runes := []rune(longest)
	for i := len(runes) / 2; i < len(runes); i++ {
		if unicode.IsLetter(runes[i]) {
			stop = string(runes[i])
			break
		}
	}
	if stop == "" {
		t.Fatalf("no letter in the second half of %q to stop at", longest)
	}
	var stopped chatAnswer
	body, _ := json.Marshal(map[string]any{
		"messages":    []map[string]string{{"role": "user", "content": "Say hello."}},
		"temperature": 0, "max_tokens": 16, "stop": []string{stop},
	})
	decode(t, mustAnswer(t, "POST", url+"/v1/chat/completions", string(body), nil, 200, ""), &stopped)
	if want := longest[:strings.Index(longest, stop)]; stopped.Choices[0].Message.Content != want || stopped.Choices[0].FinishReason != "stop" {
		t.Errorf("with stop %q: %q (%s), want %q (stop)", stop, stopped.Choices[0].Message.Content, stopped.Choices[0].FinishReason, want)
	}

	// The default (no max_tokens) still ends: at the end of generation or
	// when the slot's context (1024/2) is full.
	var a chatAnswer
	decode(t, mustAnswer(t, "POST", url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, nil, 200, ""), &a)
	if a.Usage.PromptTokens+a.Usage.CompletionTokens > 512 {
		t.Errorf("prompt and completion take %d tokens, more than a 512-token slot", a.Usage.TotalTokens)
	}
	if len(a.Choices[0].Message.Content) == 0 && a.Usage.CompletionTokens > 1 {
		t.Errorf("%d tokens generated but no content", a.Usage.CompletionTokens)
	}
}

func TestChatRequestErrors(t *testing.T) {
	t.Parallel()
	url := startReady(t, "-m", tinyModel(t), "-c", "256", "-np", "1")
	cases := []struct {
		name, body string
		status     int
		typ        string
	}{
		{"not JSON", `{`, 500, "server_error"},
		{"no messages", `{}`, 400, "invalid_request_error"},
		{"two choices", `{"messages":[{"role":"user","content":"hi"}],"n":2}`, 400, "invalid_request_error"},
		{"prompt larger than a slot", `{"messages":[{"role":"user","content":"` + strings.Repeat("hello world ", 200) + `"}]}`, 400, "exceed_context_size_error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var e struct {
				Error struct {
					Code int    `json:"code"`
					Type string `json:"type"`
				} `json:"error"`
			}
			decode(t, mustAnswer(t, "POST", url+"/v1/chat/completions", tc.body, nil, tc.status, ""), &e)
			if e.Error.Code != tc.status || e.Error.Type != tc.typ {
				t.Errorf("error %+v, want code %d type %s", e.Error, tc.status, tc.typ)
			}
		})
	}
	mustAnswer(t, "GET", url+"/no/such/route", "", nil, 404, `{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}`)
}

func TestChatStream(t *testing.T) {
	t.Parallel()
	url := startReady(t, "-m", tinyModel(t), "-np", "1", "-c", "512")
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions",
		strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}`))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("status %d content type %q, want 200 text/event-stream", resp.StatusCode, ct)
	}
	var content strings.Builder
	var finish string
	var completion int
	done := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			done = true
			break
		}
		var chunk struct {
			Object  string `json:"object"`
			Choices []struct {
				FinishReason *string `json:"finish_reason"`
				Delta        struct {
					Content *string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		decode(t, []byte(line), &chunk)
		if chunk.Object != "chat.completion.chunk" {
			t.Errorf("chunk object %q", chunk.Object)
		}
		for _, c := range chunk.Choices {
			if c.Delta.Content != nil {
				content.WriteString(*c.Delta.Content)
			}
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
		if chunk.Usage != nil {
			completion = chunk.Usage.CompletionTokens
		}
	}
	if !done || finish == "" || completion < 1 || completion > 8 {
		t.Fatalf("stream ended done=%v finish=%q completion_tokens=%d", done, finish, completion)
	}
	if finish == "length" && content.Len() == 0 {
		t.Fatal("the stream carried no content")
	}
}

// More requests than slots wait their turn rather than fail.
func TestConcurrentRequestsQueue(t *testing.T) {
	t.Parallel()
	url := startReady(t, "-m", tinyModel(t), "-np", "2", "-c", "1024")
	var wg sync.WaitGroup
	statuses := make([]int, 5)
	bodies := make([][]byte, 5)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(chatRequest))
			resp, err := client.Do(req)
			if err != nil {
				bodies[i] = []byte(err.Error())
				return
			}
			defer resp.Body.Close()
			statuses[i] = resp.StatusCode
			bodies[i], _ = io.ReadAll(resp.Body)
		}()
	}
	wg.Wait()
	for i, s := range statuses {
		if s != 200 {
			t.Errorf("request %d: status %d: %s", i, s, bodies[i])
		}
	}
}

type embeddingAnswer struct {
	Object string `json:"object"`
	Model  string `json:"model"`
	Usage  struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
	Data []struct {
		Object    string    `json:"object"`
		Index     int       `json:"index"`
		Embedding []float64 `json:"embedding"`
	} `json:"data"`
}

func TestEmbeddings(t *testing.T) {
	t.Parallel()
	t.Run("without --embedding", func(t *testing.T) {
		t.Parallel()
		url := startReady(t, "-m", tinyModel(t), "-np", "1", "-c", "512")
		mustAnswer(t, "POST", url+"/v1/embeddings", `{"input":"hello"}`, nil, 501, noEmbeddingBody)
	})
	t.Run("embedding model", func(t *testing.T) {
		t.Parallel()
		mean := uint32(1)
		model := writeModel(t, "embed.gguf", ggufgen.Spec{Pooling: &mean})
		url := startReady(t, "-m", model, "--embedding", "-np", "1", "-c", "512")
		var a embeddingAnswer
		decode(t, mustAnswer(t, "POST", url+"/v1/embeddings", `{"input":["hello world","the sky"]}`, nil, 200, ""), &a)
		if a.Object != "list" || a.Model != "embed.gguf" || len(a.Data) != 2 {
			t.Fatalf("answer %+v, want a list of two embeddings from embed.gguf", a)
		}
		for i, d := range a.Data {
			if d.Object != "embedding" || d.Index != i || len(d.Embedding) != 64 {
				t.Fatalf("data[%d] = %s %d with %d floats, want embedding %d with 64 (the embedding length)", i, d.Object, d.Index, len(d.Embedding), i)
			}
			var norm float64
			for _, v := range d.Embedding {
				norm += v * v
			}
			if math.Abs(math.Sqrt(norm)-1) > 1e-3 {
				t.Errorf("data[%d] has norm %f, want 1 (llama-server normalises)", i, math.Sqrt(norm))
			}
		}
		if a.Usage.PromptTokens <= 2 || a.Usage.TotalTokens != a.Usage.PromptTokens {
			t.Errorf("usage %+v, want the real token count", a.Usage)
		}
		// A single string is one embedding.
		decode(t, mustAnswer(t, "POST", url+"/v1/embeddings", `{"input":"hello"}`, nil, 200, ""), &a)
		if len(a.Data) != 1 || len(a.Data[0].Embedding) != 64 {
			t.Fatalf("a string gave %d embeddings", len(a.Data))
		}
		// An embedding server does not chat, as llama-server of mid-2025.
		mustAnswer(t, "POST", url+"/v1/chat/completions", chatRequest, nil, 501, "")
	})
	t.Run("model without pooling", func(t *testing.T) {
		t.Parallel()
		url := startReady(t, "-m", tinyModel(t), "--embedding", "-np", "1", "-c", "512")
		mustAnswer(t, "POST", url+"/v1/embeddings", `{"input":"hello"}`, nil, 400,
			`{"error":{"code":400,"message":"Pooling type 'none' is not OAI compatible. Please use a different pooling type","type":"invalid_request_error"}}`)
	})
}

func TestModelThatCannotLoad(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		model func(t *testing.T) string
		want  []string
	}{
		{"unknown architecture", func(t *testing.T) string {
			return writeModel(t, "foo.gguf", ggufgen.Spec{Architecture: "foo"})
		}, []string{"error loading model: ", "unknown model architecture: 'foo'"}},
		{"missing file", func(t *testing.T) string {
			return filepath.Join(t.TempDir(), "absent.gguf")
		}, []string{"error loading model: "}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out := runToExit(t, nil, append([]string{"-m", tc.model(t), "--host", "127.0.0.1", "--port", strconv.Itoa(FreePort(t))}, threads...)...)
			if code == 0 {
				t.Errorf("exit code 0, want an error; output:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output does not contain %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	model := tinyModel(t)
	t.Run("crash at start", func(t *testing.T) {
		t.Parallel()
		begin := time.Now()
		code, out := runToExit(t, []string{"LLAMATEST_CRASH_AT_START=1"}, "-m", model, "--port", strconv.Itoa(FreePort(t)))
		if code != 1 || !strings.Contains(out, "error: LLAMATEST_CRASH_AT_START") {
			t.Fatalf("exit %d, output %q; want 1 and an error line", code, out)
		}
		if d := time.Since(begin); d > 5*time.Second {
			t.Errorf("took %s to crash, want at once", d)
		}
	})
	t.Run("crash after two requests", func(t *testing.T) {
		t.Parallel()
		url, cmd, _ := startEnv(t, []string{"LLAMATEST_CRASH_AFTER=2"}, "-m", model, "-np", "1", "-c", "512")
		WaitReady(t, url, readyTimeout)
		exited := waitInBackground(t, cmd)
		for range 2 {
			mustAnswer(t, "POST", url+"/v1/chat/completions", chatRequest, nil, 200, "")
		}
		select {
		case <-exited:
			if code := cmd.ProcessState.ExitCode(); code != 1 {
				t.Fatalf("exit code %d, want 1", code)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the engine still runs after two completed requests")
		}
	})
	t.Run("never ready", func(t *testing.T) {
		t.Parallel()
		url, _, out := startEnv(t, []string{"LLAMATEST_NEVER_READY=1"}, "-m", model, "-np", "1", "-c", "512")
		// Wait until the model has loaded (the engine says so), then check
		// /health still says loading.
		deadline := time.Now().Add(readyTimeout)
		for !strings.Contains(out.String(), "LLAMATEST_NEVER_READY") {
			if time.Now().After(deadline) {
				t.Fatalf("the engine never loaded the model:\n%s", out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		for range 3 {
			mustAnswer(t, "GET", url+"/health", "", nil, 503, loadingBody)
			time.Sleep(200 * time.Millisecond)
		}
	})
}

// waitInBackground waits for cmd in a goroutine and reports its end on the
// channel. Its cleanup, which runs before Start's, kills the engine and
// receives that end, so Start's cleanup never waits a second time.
func waitInBackground(t *testing.T, cmd *exec.Cmd) <-chan error {
	exited := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		close(done)
		exited <- err
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	})
	return exited
}

// startEnv starts an engine with extra environment and the test threads.
func startEnv(t *testing.T, env []string, args ...string) (string, *exec.Cmd, *syncBuffer) {
	t.Helper()
	return start(t, env, append(args, threads...)...)
}

func TestSignalsExitZero(t *testing.T) {
	t.Parallel()
	model := tinyModel(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			url, cmd := Start(t, append([]string{"-m", model, "-np", "1", "-c", "512"}, threads...)...)
			WaitReady(t, url, readyTimeout)
			exited := waitInBackground(t, cmd)
			begin := time.Now()
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("after %s the engine ended with %v, want exit 0", sig, err)
				}
				t.Logf("exited 0 %s after %s", time.Since(begin).Round(time.Millisecond), sig)
			case <-time.After(5 * time.Second):
				t.Fatalf("the engine still runs 5s after %s", sig)
			}
		})
	}
}

func TestChatTemplateFromFile(t *testing.T) {
	t.Parallel()
	// A ChatML template as Jinja: the engine renders the file's template
	// when it has one, as llama-server does.
	tmpl := "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
	model := writeModel(t, "templated.gguf", ggufgen.Spec{ChatTemplate: tmpl})
	url := startReady(t, "-m", model, "-np", "1", "-c", "512")
	var props struct {
		ChatTemplate string `json:"chat_template"`
		TotalSlots   int    `json:"total_slots"`
	}
	decode(t, mustAnswer(t, "GET", url+"/props", "", nil, 200, ""), &props)
	if props.ChatTemplate != tmpl || props.TotalSlots != 1 {
		t.Fatalf("/props = %+v, want the file's template and one slot", props)
	}
	var a chatAnswer
	decode(t, mustAnswer(t, "POST", url+"/v1/chat/completions", chatRequest, nil, 200, ""), &a)
	if a.Usage.CompletionTokens < 1 {
		t.Fatalf("no tokens generated: %+v", a)
	}
}

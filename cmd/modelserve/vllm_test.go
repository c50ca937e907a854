package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"modelserve/internal/evals"
	"modelserve/internal/hubtest"
	"modelserve/internal/kubetest"
	"modelserve/internal/testkit"
	"modelserve/internal/testlog"
	"modelserve/internal/vllmtest"
	"modelserve/jobs"
)

// TestServeOriginalWeightsOnKubernetes serves a repository's original
// weights with --fleet kubernetes and --vllm-image: planned from its
// config.json on the cluster's L4 node, fetched with what vLLM reads
// beside them, placed as vLLM's Deployment, and answered by the pod, whose
// containers run here (the init container in busybox, fetching from the
// mirror; then the vLLM double with the pod's arguments and key), through
// the gateway, which counts what vLLM's prefix cache saved as it counts
// llama.cpp's prompt cache.
func TestServeOriginalWeightsOnKubernetes(t *testing.T) {
	busybox := kubetest.Busybox(t)
	vllm := vllmtest.Entrypoint(t, vllmtest.Hardware{Cards: 1, CardBytes: 23034 << 20})
	c := kubetest.Start(t)
	c.AddNode(t, kubetest.Node{Name: "gpu-1", CPU: 16, Memory: "64Gi", GPUs: 1,
		Labels: map[string]string{"nvidia.com/gpu.product": "NVIDIA-L4"}})
	kubeconfig := c.Kubeconfig(t, c.Account(t, "../../deploy/rbac.yaml"))

	hub := hubtest.New(t)
	const repo = "meta-llama/Llama-3.1-8B-Instruct"
	hub.AddRepo(repo, hubtest.RepoOptions{})
	cfgJSON, err := os.ReadFile(filepath.Join("..", "..", "internal", "plan", "testdata", "configs", "llama-3.1-8b-instruct.json"))
	if err != nil {
		t.Fatal(err)
	}
	hub.AddFile(repo, "config.json", cfgJSON)
	hub.AddFile(repo, "generation_config.json", []byte(`{"temperature": 0.6}`))
	hub.AddFile(repo, "tokenizer.json", []byte(`{"version": "1.0"}`))
	hub.AddFile(repo, "model-00001-of-00002.safetensors", []byte(strings.Repeat("w", 4096)))
	hub.AddFile(repo, "model-00002-of-00002.safetensors", []byte(strings.Repeat("x", 4096)))
	hub.AddFile(repo, "README.md", []byte("# Llama\n"))
	data := t.TempDir()
	mirrorToken := apiToken(t, data, "nodes")
	mustRun(t, "a long enough password\n", "user", "add", "--data", data, "alice")
	addr := freeAddr(t)
	s := startAPI(t, config{Addr: addr, Data: data, HFEndpoint: hub.URL(),
		Fleet: "kubernetes", Kubeconfig: kubeconfig, EngineImage: "ghcr.io/ggml-org/llama.cpp:server", VLLMImage: vllmtest.Image,
		MirrorURL: "http://" + addr, MirrorToken: mirrorToken})

	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": repo, "format": "safetensors", "name": "llama",
		"replicas": 1, "ctx_pool": 16384, "context_length": 4096}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d %+v", code, job)
	}
	pod := waitForPod(t, c)
	testkit.WaitFor(t, time.Minute, "the job's placement step ended", func() (bool, string) {
		var j jobs.Job
		s.do("GET", "/api/v1/jobs/"+job.ID, nil, &j)
		place, _ := j.Step(jobs.StepPlacement)
		return place.State == jobs.Done || j.Ended(), jobSaw(j)
	})
	c.RunPod(t, pod, map[string]kubetest.Image{
		"busybox:1.37": {Path: busybox},
		vllmtest.Image: {Entrypoint: vllm},
	})
	seen := s.watch(job.ID, 3*time.Minute)
	last := seen[len(seen)-1]
	if last.State != jobs.Done || last.Reply != "Hello from vLLM." {
		t.Fatalf("job ended %s: %s, reply %q\n%+v", last.State, last.Error, last.Reply, last.Steps)
	}
	check, _ := last.Step(jobs.StepCheck)
	if !strings.Contains(check.Detail, "LlamaForCausalLM") || !strings.Contains(check.Detail, "vLLM, tensor parallel 1") ||
		!strings.Contains(check.Detail, "4 requests of 4096 tokens") {
		t.Errorf("the check step says %q", check.Detail)
	}
	var answer struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if code := s.do("POST", "/v1/chat/completions", map[string]any{"model": "llama", "max_tokens": 8,
		"messages": []map[string]string{{"role": "user", "content": "hello"}}}, &answer); code != http.StatusOK ||
		len(answer.Choices) != 1 || answer.Choices[0].Message.Content != "Hello from vLLM." {
		t.Errorf("a client asking llama through the gateway: %d %+v", code, answer)
	}
	// A conversation asked again finds its first two blocks (32 tokens) in
	// vLLM's prefix cache, and the gateway counts them.
	long := map[string]any{"model": "llama", "max_tokens": 8,
		"messages": []map[string]string{{"role": "user", "content": strings.Repeat("word ", 40)}}}
	for range 2 {
		if code := s.do("POST", "/v1/chat/completions", long, nil); code != http.StatusOK {
			t.Fatalf("asking llama a long question: %d", code)
		}
	}
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	cached := 0.0
	for line := range strings.Lines(string(metrics)) {
		if rest, ok := strings.CutPrefix(line, `modelserve_gateway_tokens_total{kind="prompt_cached",model="llama",`); ok {
			_, v, _ := strings.Cut(strings.TrimSpace(rest), " ")
			cached, _ = strconv.ParseFloat(v, 64)
		}
	}
	if cached < 32 {
		t.Errorf("the gateway counts %g prompt tokens taken from vLLM's prefix cache, want at least 32", cached)
	}
	// An eval suite runs on vLLM's answers as on llama.cpp's.
	req, _ := http.NewRequest(http.MethodPut, s.base+"/api/v1/catalog/llama/evals", strings.NewReader(`{"cases": [
		{"name": "greets", "prompt": "Say hello.", "max_tokens": 16, "expect": {"regex": "^Hello"}},
		{"name": "capital", "prompt": "What is the capital of France? One word.", "max_tokens": 8, "expect": {"exact": "Paris"}}]}`))
	req.Header.Set("Authorization", "Bearer "+s.token)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT llama's suite: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}
	if run := runEvals(t, s, "llama"); run.State != evals.StateDone || run.Total != 2 || run.Passed != 1 || !run.Results[0].Pass ||
		!strings.HasPrefix(run.Results[1].Reason, `the answer is not "Paris": `) {
		t.Errorf("llama's eval run: %+v; want done, the greeting passed and the capital not", run)
	}
	var reps struct {
		Replicas []struct{ ID, Engine, State string } `json:"replicas"`
	}
	if s.do("GET", "/api/v1/replicas", nil, &reps); len(reps.Replicas) != 1 || reps.Replicas[0].Engine != "vllm" {
		t.Errorf("replicas %+v, want one on vllm", reps.Replicas)
	}
	con := newConsole(t, s.base, nil)
	con.signIn("alice", "a long enough password")
	if _, doc := con.page("/fleet"); strings.TrimSpace(doc.Find(`[data-testid="replica-engine"]`).Text()) != "vLLM" {
		t.Errorf("the fleet page does not say the replica runs on vLLM: %q", doc.Find(`[data-testid="replica"]`).Text())
	}
	// The playground streams vLLM's answer and reads its usage, which
	// vLLM sends in a chunk of its own.
	con.page("/catalog/llama/playground")
	resp = con.do("POST", "/catalog/llama/playground", url.Values{"message": {"hello"}, "max_tokens": {"16"}, "csrf": {con.csrf}})
	doc, err := goquery.NewDocumentFromReader(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(doc.Find(`[data-testid="reply-text"]`).Text()); got != "Hello from vLLM." ||
		strings.TrimSpace(doc.Find(`[data-testid="reply-tokens"]`).Text()) == "" || doc.Find(`[data-testid="reply-error"]`).Length() != 0 {
		t.Errorf("the playground's reply %q (%q tokens, error %q), want vLLM's answer with its tokens counted", got,
			doc.Find(`[data-testid="reply-tokens"]`).Text(), doc.Find(`[data-testid="reply-error"]`).Text())
	}
	var files struct {
		Files []struct{ Path string } `json:"files"`
	}
	s.do("GET", "/api/v1/mirror", nil, &files)
	for _, f := range files.Files {
		if f.Path == "README.md" {
			t.Errorf("the mirror fetched %s, which vLLM does not read", f.Path)
		}
	}
	if len(files.Files) != 5 {
		t.Errorf("the mirror holds %d files, want the 2 shards, config.json, generation_config.json and tokenizer.json: %+v", len(files.Files), files.Files)
	}
}

// TestFindVLLMReadsItsRelease: the local fleet's vllm (the double, as
// --vllm names it) is asked its release, which the check step holds models
// of original weights to; none found is none served.
func TestFindVLLMReadsItsRelease(t *testing.T) {
	var logs testlog.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	bin := filepath.Dir(vllmtest.Entrypoint(t, vllmtest.Hardware{}))
	if got := findVLLM(context.Background(), filepath.Join(bin, "vllm"), log); got != vllmtest.Version {
		t.Errorf("findVLLM = %q, want the double's release %s\n%s", got, vllmtest.Version, logs.String())
	}
	if got := findVLLM(context.Background(), filepath.Join(bin, "missing"), log); got != "" || !strings.Contains(logs.String(), "no vllm") {
		t.Errorf("findVLLM of a missing program = %q; want none, logged", got)
	}
}

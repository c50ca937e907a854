package fleet

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"modelserve/catalog"
	"modelserve/internal/plan"
)

// EngineVLLM is the catalog's name for vLLM, which runs a repository's
// original (safetensors) weights on cards.
const EngineVLLM = "vllm"

// VLLMKeyEnv is the environment variable vLLM's OpenAI server reads its
// --api-key from: the key reaches it there, never in its arguments.
const VLLMKeyEnv = "VLLM_API_KEY"

// VLLMArgs is the command line of vLLM's OpenAI server for profile p of
// m, whose files are in the folder dir (vLLM loads a folder: the weights
// with their config.json and tokenizer), as both fleets start it: p's
// cards sliced tensor-parallel, each request's context and how many run at
// once from p's pool and slots, and the share of each card the plan sized
// the model within. Each answer's usage says how much of its prompt vLLM
// took from its prefix cache (--enable-prompt-tokens-details), which the
// gateway counts as it counts llama.cpp's cache_n. The fleet adds where
// it listens.
func VLLMArgs(m catalog.Model, p catalog.Profile, dir string) []string {
	args := []string{"--model", dir, "--served-model-name", m.Name,
		"--tensor-parallel-size", strconv.Itoa(max(p.GPUsPerNode, 1)),
		"--gpu-memory-utilization", strconv.FormatFloat(plan.VLLMGPUMemoryUtilization, 'f', -1, 64)}
	if p.Pool > 0 {
		args = append(args, "--max-model-len", strconv.Itoa(p.Context()), "--max-num-seqs", strconv.Itoa(max(p.Slots, 1)))
	}
	return append(args, "--enable-prompt-tokens-details")
}

// The local fleet runs vLLM where it is installed: `vllm` on PATH, or the
// program --vllm names, started as `vllm serve` on the model's folder of
// the mirror, on the cards it was placed on (CUDA_VISIBLE_DEVICES).

// vllmPath is the vLLM program to start, looked for at each start as
// llama-server is. Its error is the sentence an operator acts on.
func (b *processes) vllmPath() (string, error) {
	name := b.opts.VLLM
	if name == "" {
		name = "vllm"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: vLLM is not installed on this node (no %s): install vLLM (pip install vllm) on a machine with cards, "+
			"or point --vllm (MODELSERVE_VLLM) at its vllm program", ErrEngineMissing, name)
	}
	return path, nil
}

// runsOnVLLM is whether a replica of profile p is vLLM's.
func runsOnVLLM(p catalog.Profile) bool { return p.Engine == EngineVLLM }

// modelEngineErr is why m's engine cannot start on this node: vLLM's own
// for a model on vLLM, llama-server's (llamaErr) for the others.
func (b *processes) modelEngineErr(m catalog.Model, llamaErr error) error {
	if len(m.Profiles) > 0 && runsOnVLLM(m.Profiles[0]) {
		_, err := b.vllmPath()
		return err
	}
	return llamaErr
}

// engineFor is the program r starts.
func (b *processes) engineFor(r *process) (string, error) {
	if r.vllm {
		return b.vllmPath()
	}
	return b.enginePath()
}

// argsOf is the command line of a replica of profile p of m on this node.
func argsOf(m catalog.Model, p catalog.Profile, weights, projector string, threads int) []string {
	if runsOnVLLM(p) {
		return append([]string{"serve"}, VLLMArgs(m, p, m.Source)...)
	}
	return EngineArgs(m, p, weights, projector, threads)
}

// keyEnvOf is the variable the engine of profile p reads its key from.
func keyEnvOf(p catalog.Profile) string {
	if runsOnVLLM(p) {
		return VLLMKeyEnv
	}
	return KeyEnv
}

// readVLLMLoad is vLLM's load from its /metrics: requests running and
// waiting, the KV cache's use, the token totals and its prefix cache's
// hits, each sample summed over its labels (vLLM labels them with the
// model's name and the engine's index). vLLM 0.11 renamed the KV cache's
// gauge and the prefix cache's counters, dropping "gpu_"; the names
// before are read where the new ones are missing.
func (b *processes) readVLLMLoad(ctx context.Context, endpoint, key string, size catalog.Size) (Load, error) {
	body, err := b.engineGet(ctx, endpoint+"/metrics", key)
	if err != nil {
		return Load{}, err
	}
	m := map[string]float64{}
	for line := range strings.Lines(string(body)) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "vllm:") {
			continue
		}
		name, rest, ok := strings.Cut(line, " ")
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			name, rest, ok = line[:i], strings.TrimSpace(line[j+1:]), true
		}
		value, _, _ := strings.Cut(strings.TrimSpace(rest), " ")
		if v, err := strconv.ParseFloat(value, 64); ok && err == nil {
			m[name] += v
		}
	}
	named := func(current, before string) (float64, bool) {
		if v, ok := m[current]; ok {
			return v, true
		}
		v, ok := m[before]
		return v, ok
	}
	// vLLM's prompt tokens count those its prefix cache held as well;
	// llama.cpp's, and so Load's, only those it evaluated.
	hits, _ := named("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
	prompt := m["vllm:prompt_tokens_total"]
	l := Load{Size: size, SlotsBusy: int(m["vllm:num_requests_running"]), Processing: int(m["vllm:num_requests_running"]),
		Deferred: int(m["vllm:num_requests_waiting"]), PromptTokens: int64(max(prompt-hits, 0)), CachedTokens: int64(min(hits, prompt)),
		PredictedTokens: int64(m["vllm:generation_tokens_total"]), At: time.Now()}
	if v, ok := named("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"); ok {
		l.KVCacheUsage = &v
	}
	return l, nil
}

// loadOf reads r's engine's load in its own engine's terms.
func (b *processes) loadOf(ctx context.Context, r *process, endpoint string) (Load, error) {
	if r.vllm {
		return b.readVLLMLoad(ctx, endpoint, r.key, r.size)
	}
	return b.readLoad(ctx, endpoint, r.key)
}

// engineName is the catalog's name of the engine a replica runs.
func engineName(vllm bool) string {
	if vllm {
		return EngineVLLM
	}
	return engineLlamaCpp
}

// EngineTitle is an engine's name as people write it, for pages.
func EngineTitle(engine string) string {
	if engine == EngineVLLM {
		return "vLLM"
	}
	return "llama.cpp"
}

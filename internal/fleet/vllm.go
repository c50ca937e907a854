package fleet

import (
	"strconv"

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
// the model within. The fleet adds where it listens.
func VLLMArgs(m catalog.Model, p catalog.Profile, dir string) []string {
	args := []string{"--model", dir, "--served-model-name", m.Name,
		"--tensor-parallel-size", strconv.Itoa(max(p.GPUsPerNode, 1)),
		"--gpu-memory-utilization", strconv.FormatFloat(plan.VLLMGPUMemoryUtilization, 'f', -1, 64)}
	if p.Pool > 0 {
		slots := max(p.Slots, 1)
		args = append(args, "--max-model-len", strconv.Itoa(p.Pool/slots), "--max-num-seqs", strconv.Itoa(slots))
	}
	return args
}

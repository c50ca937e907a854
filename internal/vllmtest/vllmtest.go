// Package vllmtest is a contract double of vLLM's OpenAI server, for tests
// on a machine with no GPU, where vLLM cannot run.
//
// modelserve starts vLLM with arguments of its own, waits for /health,
// sends OpenAI requests and reads /metrics. A double that accepted any
// argument and answered anything would let a misspelt flag, a
// tensor-parallel size vLLM refuses or a model too large for its cards
// pass every test, so this one keeps vLLM's side of the contract as far as
// it can be kept without a GPU: the arguments of the release it plays and
// no others (serve-args-0.11.txt), the model's shape from its own
// config.json, vLLM's checks on them with vLLM's own words, a load that
// takes time before the server listens, and vLLM's routes and metric
// names. What it answers is made up: a fixed reply, counted in words.
package vllmtest

import (
	"bufio"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"modelserve/internal/plan"
)

// Version is the vLLM release the double plays.
const Version = "0.11.0"

// Image is the vLLM image of that release, as a fleet is configured with.
const Image = "vllm/vllm-openai:v" + Version

//go:embed serve-args-0.11.txt
var serveArgs string

// arg is one of vllm serve's arguments.
type arg struct {
	name  string // the long flag, the key of the parsed arguments
	takes takes
}

// takes is what follows a flag, as argparse's nargs says.
type takes int

const (
	none     takes = iota // a switch
	one                   // a value
	many                  // one or more (nargs="+")
	optional              // a value or none (nargs="?")
)

var takesOf = map[string]takes{"flag": none, "value": one, "values": many, "optional": optional}

// knownArgs maps every flag and alias to its argument.
var knownArgs = func() map[string]arg {
	out := map[string]arg{}
	sc := bufio.NewScanner(strings.NewReader(serveArgs))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		k, ok := takesOf[f[len(f)-1]]
		if len(f) != 2 || !ok {
			panic("vllmtest: serve-args line " + strconv.Quote(sc.Text()) + " is not a flag and what it takes")
		}
		names := strings.Split(f[0], ",")
		for _, n := range names {
			out[n] = arg{name: names[0], takes: k}
		}
	}
	return out
}()

// Exit is how vLLM ends when it cannot serve: argparse's usage error (exit
// status 2) or the engine's ValueError (status 1), with its last words.
type Exit struct {
	Code int
	Log  string
}

func (e *Exit) Error() string { return fmt.Sprintf("vllm exited with status %d: %s", e.Code, e.Log) }

func usageError(format string, args ...any) *Exit {
	return &Exit{Code: 2, Log: "usage: vllm serve [model_tag] [options]\nvllm serve: error: " + fmt.Sprintf(format, args...)}
}

func valueError(format string, args ...any) *Exit {
	return &Exit{Code: 1, Log: "ValueError: " + fmt.Sprintf(format, args...)}
}

// Args are the arguments vLLM would start with, parsed.
type Args struct {
	Model                string
	ServedModelName      string
	Host                 string
	Port                 int
	TensorParallel       int
	PipelineParallel     int
	MaxModelLen          int // 0: the model's max_position_embeddings
	MaxNumSeqs           int
	GPUMemoryUtilization float64
	APIKey               string
	// Given holds every argument as given, by its long flag ("" for a
	// flag that takes no value).
	Given map[string]string
}

// ParseArgs reads `vllm serve`'s command line (without "vllm serve" or
// the image's entrypoint in front) as its argparse would: the model
// positional or --model, --flag value or --flag=value, the aliases; an
// argument the release does not have is refused in argparse's words.
// VLLM_API_KEY in env is the key when --api-key is not given, as vLLM
// reads it.
func ParseArgs(argv []string, env func(string) string) (Args, error) {
	a := Args{Host: "0.0.0.0", Port: 8000, TensorParallel: 1, PipelineParallel: 1, MaxNumSeqs: 256,
		GPUMemoryUtilization: 0.9, Given: map[string]string{}}
	var unknown []string
	for i := 0; i < len(argv); i++ {
		s := argv[i]
		if !strings.HasPrefix(s, "-") {
			if a.Model != "" {
				unknown = append(unknown, s)
				continue
			}
			a.Model = s
			continue
		}
		name, val, hasVal := strings.Cut(s, "=")
		k, ok := knownArgs[name]
		if !ok {
			unknown = append(unknown, s)
			continue
		}
		// argparse takes a word that begins with "-" as a value only when
		// it is a number.
		isValue := func(j int) bool {
			if j >= len(argv) {
				return false
			}
			_, err := strconv.ParseFloat(argv[j], 64)
			return !strings.HasPrefix(argv[j], "-") || err == nil
		}
		switch {
		case k.takes == none && hasVal:
			return Args{}, usageError("argument %s: ignored explicit argument '%s'", name, val)
		case hasVal, k.takes == none:
		case k.takes == optional:
			if isValue(i + 1) {
				i++
				val = argv[i]
			}
		case !isValue(i + 1):
			if k.takes == many {
				return Args{}, usageError("argument %s: expected at least one argument", name)
			}
			return Args{}, usageError("argument %s: expected one argument", name)
		default:
			i++
			val = argv[i]
			// nargs="+" takes every value up to the next flag; the
			// first is the one the double reads.
			for k.takes == many && isValue(i+1) {
				i++
			}
		}
		a.Given[k.name] = val
	}
	if len(unknown) > 0 {
		return Args{}, usageError("unrecognized arguments: %s", strings.Join(unknown, " "))
	}
	if m, ok := a.Given["--model"]; ok {
		a.Model = m
	}
	ints := []struct {
		flag string
		to   *int
	}{{"--port", &a.Port}, {"--tensor-parallel-size", &a.TensorParallel}, {"--pipeline-parallel-size", &a.PipelineParallel},
		{"--max-model-len", &a.MaxModelLen}, {"--max-num-seqs", &a.MaxNumSeqs}}
	for _, f := range ints {
		v, ok := a.Given[f.flag]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			// --max-model-len is parsed by vLLM's human_readable_int
			// ("32k"), which the double does not read: modelserve
			// passes plain numbers.
			kind := "int"
			if f.flag == "--max-model-len" {
				kind = "human_readable_int"
			}
			return Args{}, usageError("argument %s: invalid %s value: '%s'", f.flag, kind, v)
		}
		*f.to = n
	}
	if v, ok := a.Given["--gpu-memory-utilization"]; ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return Args{}, usageError("argument --gpu-memory-utilization: invalid float value: '%s'", v)
		}
		a.GPUMemoryUtilization = f
	}
	if v, ok := a.Given["--host"]; ok {
		a.Host = v
	}
	a.APIKey = a.Given["--api-key"]
	if a.APIKey == "" && env != nil {
		a.APIKey = env("VLLM_API_KEY")
	}
	a.ServedModelName = a.Given["--served-model-name"]
	if a.ServedModelName == "" {
		a.ServedModelName = a.Model
	}
	if a.Model == "" {
		a.Model = "facebook/opt-125m" // vLLM's own default
	}
	return a, nil
}

// Hardware is what the double pretends the pod has: the cards it sees and
// each one's memory.
type Hardware struct {
	Cards     int
	CardBytes int64
}

// overheadBytes is what the double takes vLLM to spend on each card
// beside the weights before its KV cache: the CUDA context, activations
// and CUDA graphs. The planner counts as much.
const overheadBytes = 2 << 30

// blockSize is vLLM's KV cache block, in tokens (--block-size's default).
const blockSize = 16

// Check is what vLLM checks as it starts, in its own words: the model's
// config.json, the tensor-parallel size against its heads, the context
// against what it was trained for, the cards, and the memory the KV cache
// has once the weights are on the cards. It returns the model's shape and
// the tokens the KV cache holds.
func Check(a Args, hw Hardware, env func(string) string) (plan.ModelConfig, int64, error) {
	raw, err := os.ReadFile(filepath.Join(a.Model, "config.json"))
	if err != nil {
		return plan.ModelConfig{}, 0, &Exit{Code: 1, Log: fmt.Sprintf("OSError: %s does not appear to have a file named config.json.", a.Model)}
	}
	c, err := plan.ParseModelConfig(raw)
	if err != nil {
		return plan.ModelConfig{}, 0, valueError("%v", err)
	}
	if a.TensorParallel < 1 || a.PipelineParallel < 1 {
		return c, 0, valueError("tensor_parallel_size and pipeline_parallel_size must be positive integers")
	}
	if c.Heads%a.TensorParallel != 0 {
		return c, 0, valueError("Total number of attention heads (%d) must be divisible by tensor parallel size (%d).", c.Heads, a.TensorParallel)
	}
	if a.MaxModelLen == 0 {
		a.MaxModelLen = c.MaxPosition
	}
	if c.MaxPosition > 0 && a.MaxModelLen > c.MaxPosition && (env == nil || env("VLLM_ALLOW_LONG_MAX_MODEL_LEN") != "1") {
		return c, 0, valueError("User-specified max_model_len (%d) is greater than the derived max_model_len (max_position_embeddings=%d or model_max_length=None in model's config.json). "+
			"This may lead to incorrect model outputs or CUDA errors. To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
			a.MaxModelLen, c.MaxPosition)
	}
	world := a.TensorParallel * a.PipelineParallel
	if world > hw.Cards {
		return c, 0, valueError("The number of required GPUs exceeds the total number of available GPUs in the placement group.")
	}
	var weights int64
	entries, _ := os.ReadDir(a.Model)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".safetensors") {
			if info, err := e.Info(); err == nil {
				weights += info.Size()
			}
		}
	}
	// Each card holds its slice of the weights and of every token's KV
	// cache, within its share of the card.
	perCard := float64(hw.CardBytes)*a.GPUMemoryUtilization - float64(weights)/float64(world) - overheadBytes
	kvPerCard := float64(c.KVBytesPerToken()) / float64(world)
	blocks := int64(0)
	if perCard > 0 {
		blocks = int64(perCard / (kvPerCard * blockSize))
	}
	if blocks <= 0 {
		return c, 0, valueError("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.")
	}
	if tokens := blocks * blockSize; int64(a.MaxModelLen) > tokens {
		return c, tokens, valueError("The model's max seq len (%d) is larger than the maximum number of tokens that can be stored in KV cache (%d). "+
			"Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.", a.MaxModelLen, tokens)
	}
	return c, blocks * blockSize, nil
}

// ErrStopped is Run's answer when its context ended it.
var ErrStopped = errors.New("vllmtest: stopped")

// LoadTime is how long the double takes to load by default: long enough
// that a caller who does not wait for /health finds nothing listening.
const LoadTime = 500 * time.Millisecond

package plan

import (
	"fmt"
	"modelserve/internal/operr"

	"modelserve/internal/hf"
)

// CPUSlowTPS is the tokens per second below which a reply on the CPU is
// slow enough to say so: at 5 a reply of 500 tokens takes over a minute and
// a half.
const CPUSlowTPS = 5

// LayoutRequest is where the operator asked a model to run; empty asks the
// plan.
type LayoutRequest struct {
	CPU         bool
	GPUClass    string
	GPUsPerNode int
	Nodes       int
	// Format is "gguf" (or empty) for a GGUF file, "safetensors" for the
	// original weights.
	Format string
	// Fallbacks adds the next best shapes, lower in priority, so a model
	// whose first choice is busy runs on another rather than waiting.
	Fallbacks bool
}

// ChooseLayout is where a model runs: what was asked, else the plan's best
// for the chosen file; with Fallbacks, the next best shapes after it, up to
// three in all. planned says whether plan was made (a job whose planning
// failed still serves what was asked, or the CPU).
func ChooseLayout(req LayoutRequest, plan Plan, planned bool, set hf.FileSet) ([]Option, error) {
	artifact, format, engine := set.Name, FormatGGUF, EngineLlamaCpp
	if req.Format == FormatSafetensors {
		artifact, format, engine = Original, FormatSafetensors, EngineVLLM
		if req.CPU {
			return nil, operr.New(operr.Invalid, "original weights run on vLLM, on GPUs; a GGUF file runs on the CPU")
		}
	}
	opts := plan.For(artifact)
	var out []Option
	switch {
	case req.CPU || req.GPUClass != "":
		o := Option{Artifact: artifact, Quant: set.Quant, Format: format, Engine: engine, CPU: req.CPU}
		if !req.CPU {
			o.Class, o.GPUsPerNode, o.Nodes = req.GPUClass, max(req.GPUsPerNode, 1), max(req.Nodes, 1)
		}
		if o.Nodes > 1 && engine == EngineLlamaCpp {
			return nil, operr.New(operr.Invalid, "llama.cpp does not span nodes; serve the original weights with vLLM for that")
		}
		// The plan's own reckoning of that shape, if it made one: what it
		// needs and on how many hosts.
		for _, p := range opts {
			if p.CPU == o.CPU && p.Class == o.Class && p.GPUsPerNode == o.GPUsPerNode && max(p.Nodes, 1) == max(o.Nodes, 1) {
				o = p
				break
			}
		}
		// A shape the plan did not offer is still a mixture of experts.
		o.ExpertParallel = engine == EngineVLLM && plan.Experts > 1 && o.GPUs() > 1
		out = append(out, o)
	case len(opts) > 0 && opts[0].Fit != FitsNowhere:
		out = append(out, opts[0])
	case planned && len(opts) > 0:
		// The best of the shapes that do not fit, in the words the serve
		// page shows for it.
		return nil, operr.New(operr.Refused, "%s %s; `GET /api/v1/repos/%s` shows what each file needs", set.Name, opts[0].Why, plan.Repo)
	case planned:
		return nil, operr.New(operr.Refused, "%s fits nowhere in this pool: the pool has no node to run it; `GET /api/v1/nodes` shows the pool", set.Name)
	case engine == EngineVLLM:
		return nil, operr.New(operr.Invalid, "original weights run on vLLM, on GPUs: name the GPU class")
	default:
		out = append(out, Option{Artifact: artifact, Quant: set.Quant, Format: format, Engine: engine, CPU: true})
	}
	if engine == EngineVLLM {
		if err := TensorParallelError(plan.ModelConfig, out[0].GPUsPerNode); err != nil {
			return nil, err
		}
		if err := multiNodeError(out[0]); err != nil {
			return nil, err
		}
	}
	if req.Fallbacks {
		shape := func(o Option) string {
			return fmt.Sprintf("%v/%s/%d/%d", o.CPU, o.Class, o.GPUsPerNode, max(o.Nodes, 1))
		}
		seen := map[string]bool{shape(out[0]): true}
		for _, o := range opts {
			if len(out) == 3 {
				break
			}
			// A fallback that cannot run anywhere is no fallback.
			if o.Fit != FitsNowhere && !seen[shape(o)] && multiNodeError(o) == nil {
				seen[shape(o)] = true
				out = append(out, o)
			}
		}
	}
	return out, nil
}

// HardwareExists is whether the pool has what the chosen shapes need, busy
// or not: the plan found nodes for one, or one was asked for by hand
// without a plan to say.
func HardwareExists(layout []Option) bool {
	for _, o := range layout {
		if o.Hosts >= max(o.Nodes, 1) || o.Capable >= max(o.Nodes, 1) || (o.Class != "" && o.NeedGB == 0) {
			return true
		}
	}
	return false
}

// SlowCPU is the check step's sentence for a model that will answer slowly
// on the CPU, and whether there is one to say: it was asked for, so it is
// said rather than refused, and the job's log then says why replies take
// minutes.
func SlowCPU(o Option) (string, bool) {
	if !o.CPU || o.TokensPerSecond <= 0 || o.TokensPerSecond >= CPUSlowTPS {
		return "", false
	}
	tps := o.TokensPerSecond
	return fmt.Sprintf("on the CPU about %.1f tokens a second for one reply: "+
		"a reply of 500 tokens takes about %.0f seconds; a card would be many times faster", tps, 500/tps), true
}

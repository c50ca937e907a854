package plan

import (
	"context"
	"fmt"
	"strings"

	"modelserve/internal/hf"
	"modelserve/internal/operr"
)

// readConfig reads and parses the repository's config.json for its
// original weights; note says in a sentence why there is none.
func (p *Planner) readConfig(ctx context.Context, repo hf.Repo) (*ModelConfig, string) {
	if p.cfg.Configs == nil {
		return nil, ""
	}
	var file *hf.File
	for _, f := range hf.Companions(repo.Files) {
		if f.Path == "config.json" {
			file = &f
			break
		}
	}
	switch {
	case file == nil:
		return nil, "the repository has no config.json, which vLLM reads the model's shape from"
	case file.Size > MaxConfigBytes:
		return nil, fmt.Sprintf("its config.json is larger than %d KiB", MaxConfigBytes>>10)
	}
	b, err := p.cfg.Configs(ctx, p.cfg.DownloadURL(repo.ID, repo.Commit, file.Path))
	if err != nil {
		// The cause is the reader's, not a sentence for the page.
		p.cfg.Log.Warn("reading config.json to plan", "repo", repo.ID, "err", err)
		return nil, "its config.json could not be read (the server's log says why)"
	}
	c, err := ParseModelConfig(b)
	if err != nil {
		msg, _ := operr.Sentence(err)
		return nil, msg
	}
	return &c, ""
}

// TensorParallelError is vLLM's refusal of tensor parallel size k for the
// model (nil when it runs, or when its shape is not known): it slices
// every layer's attention heads over its k cards, so k must divide them.
func TensorParallelError(c *ModelConfig, k int) error {
	if c == nil || k <= 1 || c.Heads%k == 0 {
		return nil
	}
	var fits []string
	for _, g := range []int{1, 2, 4, 8} {
		if c.Heads%g == 0 {
			fits = append(fits, fmt.Sprint(g))
		}
	}
	return operr.New(operr.Invalid, "%s has %d attention heads, which vLLM cannot slice over %d cards (tensor parallel size %d must divide them): "+
		"serve it on %s cards", c.Architecture, c.Heads, k, k, strings.Join(fits, ", "))
}

// multiNodeError refuses a layout over several nodes: vLLM would run it
// pipeline parallel between them, which the fleets do not start.
func multiNodeError(o Option) error {
	if max(o.Nodes, 1) <= 1 {
		return nil
	}
	return operr.New(operr.Refused, "the original weights need %d nodes of %d×%s; multi-node serving is not supported yet: serve a GGUF file of it, or a smaller model",
		o.Nodes, max(o.GPUsPerNode, 1), o.Class)
}

// RunsOn is where and how the option runs, for a page that lists the
// artifacts of both engines side by side: its shape for llama.cpp ("CPU",
// "2×L4"), and for vLLM the engine and its parallelism too ("vLLM, 2×L4,
// tensor parallel").
func (o Option) RunsOn() string {
	if o.Engine != EngineVLLM {
		return o.Label()
	}
	switch {
	case max(o.Nodes, 1) > 1:
		return "vLLM, " + o.Label() + ", tensor and pipeline parallel"
	case o.GPUs() > 1:
		return "vLLM, " + o.Label() + ", tensor parallel"
	}
	return "vLLM, " + o.Label()
}

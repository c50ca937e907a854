package jobs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"modelserve/catalog"
	"modelserve/internal/plan"
	"modelserve/internal/words"
)

// checkOriginal is the check step for original weights: vLLM reads the
// model's shape from the config.json fetched with them, so the step reads
// the same file from the mirror, holds its model class to the vLLM
// release the image's tag names and its heads to the cards it is laid out
// on, and makes the profile vLLM is started with.
func (p *pipeline) checkOriginal() error {
	i := -1
	for j, f := range p.choice.Set.Files {
		if f.Path == "config.json" {
			i = j
		}
	}
	if i < 0 || i >= len(p.paths) {
		return sentencef("%s has no config.json on the mirror, which vLLM reads the model's shape from: serve it again", p.repo.ID)
	}
	raw, err := os.ReadFile(p.paths[i])
	if err != nil {
		return fmt.Errorf("reading %s's config.json from the mirror: %w", p.repo.ID, err)
	}
	c, err := plan.ParseModelConfig(raw)
	if err != nil {
		return err
	}
	release := plan.VLLMImageVersion(p.s.deps.VLLM)
	if !release.Known() {
		release, _ = plan.ParseVLLMVersion(p.s.deps.VLLM)
	}
	if err := plan.KnownVLLMArchitectures().Supported(c.Architecture, release); err != nil {
		return err
	}
	o := p.choice.First()
	if err := plan.TensorParallelError(&c, o.GPUsPerNode); err != nil {
		return err
	}
	pool, slots := p.plan.Context, max(p.plan.Parallel, 1)
	if pool == 0 {
		pool = p.req.context()
	}
	if c.MaxPosition > 0 && pool/slots > c.MaxPosition {
		pool = c.MaxPosition * slots
	}
	cards := max(o.GPUsPerNode, 1)
	need := int64(o.NeedGB * (1 << 30))
	p.profiles = []catalog.Profile{{
		Name: fmt.Sprintf("gpu-%dx%s", cards, strings.ToLower(o.Class)), Engine: plan.EngineVLLM,
		GPUClass: o.Class, GPUsPerNode: cards, CardBytes: need, Pool: pool, Slots: slots, Priority: 100, Weight: 1,
		Env: p.req.Env,
	}}
	p.req.CtxPool, p.req.ContextLength = pool, pool/slots
	on := "on one " + o.Class
	if cards > 1 {
		on = fmt.Sprintf("on each of %d %s cards", cards, o.Class)
	}
	p.s.step(p.l, StepCheck, Done, fmt.Sprintf("%s from %s, needs %s %s (vLLM, tensor parallel %d); %s of %d tokens at once",
		c, filepath.Base(p.paths[i]), words.GB(o.NeedGB), on, cards, words.Count(slots, "request", "requests"), pool/slots))
	return nil
}

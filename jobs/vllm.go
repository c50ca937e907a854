package jobs

import (
	"fmt"
	"os"
	"path/filepath"

	"modelserve/internal/plan"
	"modelserve/internal/words"
)

// checkOriginal is the check step for original weights: vLLM reads the
// model's shape from the config.json fetched with them, so the step reads
// the same file from the mirror and asks the plan for the profiles vLLM is
// started with (plan.Choice.ServeOriginal), as the check of a GGUF file
// asks it for llama.cpp's.
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
	size := p.plan.Size
	if !size.Sized() {
		size = p.req.Size()
	}
	c, size, profiles, err := p.choice.ServeOriginal(raw, p.s.deps.VLLM, size, plan.Extra{Env: p.req.Env})
	if err != nil {
		return err
	}
	p.profiles = profiles
	p.req.CtxPool, p.req.ContextLength = size.Pool, size.Context()
	o, cards := p.choice.First(), profiles[0].GPUsPerNode
	on := "on one " + o.Class
	if cards > 1 {
		on = fmt.Sprintf("on each of %d %s cards", cards, o.Class)
	}
	p.s.step(p.l, StepCheck, Done, fmt.Sprintf("%s from %s, needs %s %s (vLLM, tensor parallel %d); %s of %d tokens at once",
		c, filepath.Base(p.paths[i]), words.GB(o.NeedGB), on, cards, words.Count(size.Slots, "request", "requests"), size.Context()))
	return nil
}

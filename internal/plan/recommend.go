package plan

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"modelserve/internal/hf"
	"modelserve/internal/words"
)

// candidate is a GGUF set and its best option.
type candidate struct {
	set  SetPlan
	best Option
	// full names it by its set's name, where another set shares its
	// quantisation.
	full bool
}

func (c candidate) name() string {
	if c.full {
		return c.set.Name
	}
	return cmp.Or(c.set.Quant, c.set.Name)
}

// named gives each candidate the name a sentence calls it by: its
// quantisation, or its file set's name where two sets share one ("Q4_K_M
// fits" did not say which of two Q4_K_M files).
func named(all []candidate) {
	count := map[string]int{}
	for _, c := range all {
		count[c.name()]++
	}
	for i, c := range all {
		all[i].full = count[c.name()] > 1
	}
}

func (c candidate) rank() int { return hf.QuantRank(c.set.Quant) }

// totalGB is what the set needs in all with the plan's context, whatever
// it runs on.
func (c candidate) totalGB() float64 { return c.best.WeightsGB + c.best.KVGB + c.best.OverheadGB }

// recommend picks the file to serve by default: the best quality (by
// hf.QuantRank) whose best option fits the pool now, else the best that fits
// the pool's hardware while it is busy; never one the pool cannot hold; F32
// only when the repository has nothing else; on a card rather than a CPU
// when any file fits a card. Ties go to the joined file over shards (one
// download to verify), then the faster.
func recommend(pl Plan) (*Option, string) {
	var all []candidate
	for _, sp := range pl.Sets {
		if sp.Format != FormatGGUF || !sp.Planned {
			continue
		}
		if opts := pl.For(sp.Name); len(opts) > 0 {
			all = append(all, candidate{set: sp, best: opts[0]})
		}
	}
	if len(all) == 0 {
		if slices.ContainsFunc(pl.Sets, func(s SetPlan) bool { return s.Format == FormatSafetensors }) {
			return nil, "the repository has no complete GGUF file for llama.cpp: serve its original weights with vLLM on GPUs"
		}
		return nil, "the repository has no complete GGUF file to recommend"
	}
	onlyF32 := !slices.ContainsFunc(all, func(c candidate) bool { return !isF32(c.set.Quant) })
	named(all)
	type pass struct {
		fit    string
		shrunk bool
	}
	// A file that holds the default pool before a better one that holds
	// only a context cut to fit: an F16 at 1024 tokens is no one's choice
	// over a Q8_0 at 16384.
	for _, want := range []pass{{FitsNow, false}, {FitsNow, true}, {FitsHardware, false}, {FitsHardware, true}} {
		var fits []candidate
		for _, c := range all {
			if c.best.Fit == want.fit && c.best.Sizing.Shrunk == want.shrunk && (onlyF32 || !isF32(c.set.Quant)) {
				fits = append(fits, c)
			}
		}
		if len(fits) == 0 {
			continue
		}
		// A file that runs on a card before a better one that runs only
		// on a CPU: tens of tokens a second against a few.
		if slices.ContainsFunc(fits, func(c candidate) bool { return !c.best.CPU }) {
			fits = slices.DeleteFunc(fits, func(c candidate) bool { return c.best.CPU })
		}
		slices.SortStableFunc(fits, func(a, b candidate) int {
			return cmp.Or(
				cmp.Compare(b.rank(), a.rank()),
				cmp.Compare(a.set.Shards, b.set.Shards),
				cmp.Compare(b.best.TokensPerSecond, a.best.TokensPerSecond),
				strings.Compare(a.set.Name, b.set.Name),
			)
		})
		chosen := fits[0]
		o := chosen.best
		return &o, reason(pl, all, chosen)
	}
	smallest := slices.MinFunc(all, func(a, b candidate) int { return cmp.Compare(a.totalGB(), b.totalGB()) })
	return nil, fmt.Sprintf("no file fits this pool with a %d-token pool: the smallest, %s, needs %s, more than "+
		"any node's memory or any card of the pool holds; ask for a shorter context, or add a node that holds it",
		pl.Size.Pool, smallest.name(), words.GB(smallest.totalGB()))
}

// reason is the sentence that says why the chosen file is the one.
func reason(pl Plan, all []candidate, chosen candidate) string {
	o := chosen.best
	// The option's own pool: for llama.cpp the one Size settled on, which
	// may be the default cut to fit.
	fits := fmt.Sprintf("%s with a %d-token pool %s", o.needText(), cmp.Or(o.Context, pl.Size.Pool), o.where())
	if o.Fit == FitsHardware {
		fits += ", though that hardware is in use now"
	}
	if len(all) == 1 {
		return fmt.Sprintf("%s is the only GGUF file in the repository, and it fits: %s", chosen.name(), fits)
	}
	// The nearest better quality, to say what stopped it.
	var next *candidate
	for i, c := range all {
		if c.rank() <= chosen.rank() || (isF32(c.set.Quant) && !isF32(chosen.set.Quant)) {
			continue
		}
		if next == nil || c.rank() < next.rank() || (c.rank() == next.rank() && c.totalGB() < next.totalGB()) {
			next = &all[i]
		}
	}
	if next == nil {
		if slices.ContainsFunc(all, func(c candidate) bool { return isF32(c.set.Quant) }) && !isF32(chosen.set.Quant) {
			return fmt.Sprintf("%s is the best quality that fits short of F32, which is served only when nothing else exists: %s",
				chosen.name(), fits)
		}
		return fmt.Sprintf("%s is the best quality in the repository, and it fits: %s", chosen.name(), fits)
	}
	runs := func(fit string, cpu bool) bool {
		return slices.ContainsFunc(pl.For(next.set.Name), func(x Option) bool { return x.Fit == fit && x.CPU == cpu })
	}
	why := "nothing in the pool holds it"
	switch {
	case runs(FitsHardware, o.CPU):
		why = "no node has it free"
	case !o.CPU && (runs(FitsNow, true) || runs(FitsHardware, true)):
		why = "no card holds it"
	}
	return fmt.Sprintf("%s is the best quality that fits: %s; %s needs %s and %s",
		chosen.name(), fits, next.name(), words.GB(next.totalGB()), why)
}

func isF32(q string) bool { return strings.EqualFold(q, "F32") }

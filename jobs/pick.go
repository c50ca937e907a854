package jobs

import (
	"path"
	"slices"
	"strings"

	"modelserve/internal/hf"
	"modelserve/internal/plan"
	"modelserve/internal/words"
)

// defaultQuant is the quantisation served when neither the request nor a
// planner says: about a quarter of the original size, and close to it in
// quality.
const defaultQuant = "Q4_K_M"

// pick chooses the GGUF file set to serve: by file or set name, else by
// quantisation. A set that lacks shards is refused naming them, and a name
// that matches nothing is answered with what the repository has.
func pick(repo hf.Repo, req Request) (hf.FileSet, error) {
	sets := hf.Holds(repo).GGUF
	if len(sets) == 0 {
		return hf.FileSet{}, sentencef("%s has no GGUF files; the nodes run llama.cpp, which needs one: serve its original weights with the format safetensors, or pick a GGUF repository", repo.ID)
	}
	var match []hf.FileSet
	if req.File != "" {
		for _, st := range sets {
			if st.Name == req.File || slices.ContainsFunc(st.Files, func(f hf.File) bool {
				return f.Path == req.File || path.Base(f.Path) == req.File
			}) {
				match = append(match, st)
			}
		}
	} else {
		want := strings.ToLower(req.Quant)
		for _, st := range sets {
			if strings.EqualFold(st.Quant, req.Quant) {
				match = append(match, st)
			}
		}
		// A name the quantisation reader does not know ("Q4_K_M-imat"):
		// as written in the file name.
		if len(match) == 0 {
			for _, st := range sets {
				if strings.Contains(strings.ToLower(st.Name), want) {
					match = append(match, st)
				}
			}
		}
	}
	if len(match) == 0 {
		names := make([]string, 0, len(sets))
		for _, st := range sets {
			names = append(names, st.Name)
		}
		return hf.FileSet{}, sentencef("%s has no file matching %q; it has: %s", repo.ID, or(req.File, req.Quant), strings.Join(names, ", "))
	}
	// Both a split and a joined copy of one quantisation: the joined one,
	// which is one download to verify rather than several.
	slices.SortStableFunc(match, func(a, b hf.FileSet) int { return a.Shards - b.Shards })
	set := match[0]
	if len(set.Missing) > 0 {
		return hf.FileSet{}, sentencef("%s is split into %d shards and %s lacks %s %s: it cannot be served whole; pick another file",
			set.Name, set.Shards, repo.ID, words.Plural(len(set.Missing), "shard", "shards"), joinInts(set.Missing))
	}
	return set, nil
}

// pickSafetensors chooses a repository's original weights and the files an
// engine reads beside them: config.json, the tokenizer, the shard index.
func pickSafetensors(repo hf.Repo, _ Request) (hf.FileSet, error) {
	original := hf.Holds(repo).Original
	if original == nil {
		return hf.FileSet{}, sentencef("%s has no safetensors weights at its top: serve one of its GGUF files instead, or pick another repository", repo.ID)
	}
	set := *original
	if len(set.Missing) > 0 {
		return hf.FileSet{}, sentencef("%s is split into %d shards and %s lacks %s %s: it cannot be served whole",
			set.Name, set.Shards, repo.ID, words.Plural(len(set.Missing), "shard", "shards"), joinInts(set.Missing))
	}
	companions := hf.Companions(repo.Files)
	if !slices.ContainsFunc(companions, func(f hf.File) bool { return f.Path == "config.json" }) {
		return hf.FileSet{}, sentencef("%s has no config.json, which vLLM reads the model's shape from: pick a repository that has one", repo.ID)
	}
	for _, f := range companions {
		set.Files = append(set.Files, f)
		set.Bytes += f.Size
	}
	return set, nil
}

// projector finds the vision projector the request names, by path or by
// file name.
func projector(repo hf.Repo, name string) (hf.File, error) {
	all := hf.Projectors(repo.Files)
	i := slices.IndexFunc(all, func(f hf.File) bool { return f.Path == name || path.Base(f.Path) == name })
	if i >= 0 {
		return all[i], nil
	}
	if len(all) == 0 {
		return hf.File{}, sentencef("%s has no vision projector %q; it has none: serve it without a projector", repo.ID, name)
	}
	paths := make([]string, 0, len(all))
	for _, f := range all {
		paths = append(paths, f.Path)
	}
	return hf.File{}, sentencef("%s has no vision projector %q; it has: %s", repo.ID, name, strings.Join(paths, ", "))
}

// label is where a layout runs, as the plan step says it.
func label(o plan.Option) string {
	if o.CPU {
		return "cpu"
	}
	return o.Label()
}

// where is a layout for a sentence: "of the node's RAM", "on 2×L4".
func where(o plan.Option) string {
	if o.CPU {
		return "of the node's RAM"
	}
	return "on " + o.Label()
}

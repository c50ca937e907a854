package hf

import (
	"cmp"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// shardStem matches the stem of a split file, "<prefix>-00001-of-00003",
// as llama.cpp's gguf-split and transformers' save_pretrained both write it:
// five digits each, counted from 1.
var shardStem = regexp.MustCompile(`^(.+)-([0-9]{5})-of-([0-9]{5})$`)

// weightExt is the file's weight format (".gguf" or ".safetensors", lower
// case), or "" for a file that holds no weights.
func weightExt(p string) string {
	lower := strings.ToLower(p)
	for _, ext := range []string{".gguf", ".safetensors"} {
		if strings.HasSuffix(lower, ext) {
			return ext
		}
	}
	return ""
}

// notWeights says whether a GGUF-looking file is something other than a
// model's weights: a vision projector, or an importance matrix (which
// quantisers publish beside the quants, sometimes as .gguf).
func notWeights(p string) bool {
	lower := strings.ToLower(p)
	return strings.Contains(lower, "mmproj") || strings.Contains(lower, "imatrix")
}

// Group gathers a repository's weight files into the sets a model is served
// from, and ignores everything else (READMEs, configs, projectors,
// importance matrices).
//
// A file split into shards, "<prefix>-00001-of-00003.gguf", becomes one set
// holding its shards in order; a file that is not split is a set of its own.
// The set's name is the file's path without the extension and without the
// shard numbers, folder included: "Q8_0/Qwen2.5-7B-Instruct-Q8_0" for shards
// in a Q8_0 folder, "Qwen2.5-7B-Instruct-Q4_K_M" at the top. Keeping the
// folder makes every name point at one place in the repository, so shards in
// different folders are never merged and a name the operator copies from a
// listing picks exactly that set.
//
// A joined copy and a split copy of one quantisation share a name but are
// two sets (Shards 1 and Shards M); the joined one sorts first. A set that
// lacks some of its shards is still returned, with the absent shard numbers
// in Missing, so that the operator is told rather than shown nothing.
//
// Safetensors weights ("model-00001-of-00004.safetensors",
// "model.safetensors") are grouped the same way; sets of the two formats are
// never merged. Sets are sorted by name.
func Group(files []File) []FileSet {
	type key struct {
		dir, prefix, ext string
		of               int // 0 for a file that is not split
	}
	type shard struct {
		n int
		f File
	}
	shards := map[key][]shard{}
	var order []key
	for _, f := range files {
		ext := weightExt(f.Path)
		if ext == "" || notWeights(f.Path) {
			continue
		}
		dir, base := path.Split(f.Path)
		stem := base[:len(base)-len(ext)]
		k, n := key{dir: dir, prefix: stem, ext: ext}, 1
		if m := shardStem.FindStringSubmatch(stem); m != nil {
			i, _ := strconv.Atoi(m[2])
			of, _ := strconv.Atoi(m[3])
			// "-00000-of-00002" or "-00003-of-00002" is no shard llama.cpp
			// would write; such a file is listed as it is, on its own.
			if i >= 1 && i <= of {
				k, n = key{dir: dir, prefix: m[1], ext: ext, of: of}, i
			}
		}
		if _, seen := shards[k]; !seen {
			order = append(order, k)
		}
		shards[k] = append(shards[k], shard{n, f})
	}

	sets := make([]FileSet, 0, len(order))
	for _, k := range order {
		got := shards[k]
		// Paths are unique, so two files with one shard number differ only
		// in the case of the extension; the first by path stands.
		slices.SortStableFunc(got, func(a, b shard) int {
			return cmp.Or(cmp.Compare(a.n, b.n), strings.Compare(a.f.Path, b.f.Path))
		})
		got = slices.CompactFunc(got, func(a, b shard) bool { return a.n == b.n })

		set := FileSet{Name: k.dir + k.prefix, Shards: max(k.of, 1)}
		next := 1
		for _, s := range got {
			for ; next < s.n; next++ {
				set.Missing = append(set.Missing, next)
			}
			next = s.n + 1
			set.Files = append(set.Files, s.f)
			set.Bytes += s.f.Size
		}
		for ; next <= set.Shards; next++ {
			set.Missing = append(set.Missing, next)
		}
		set.Quant = Quant(set.Name)
		sets = append(sets, set)
	}
	slices.SortStableFunc(sets, func(a, b FileSet) int {
		return cmp.Or(
			strings.Compare(a.Name, b.Name),
			cmp.Compare(a.Shards, b.Shards),
			strings.Compare(a.Files[0].Path, b.Files[0].Path),
		)
	})
	return sets
}

// Projectors are the vision projectors among a repository's files: the
// mmproj GGUF files a vision model loads beside its weights. Sorted by path.
func Projectors(files []File) []File {
	var out []File
	for _, f := range files {
		lower := strings.ToLower(f.Path)
		if strings.HasSuffix(lower, ".gguf") && strings.Contains(lower, "mmproj") {
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// companionNames are the files an engine serving original (safetensors)
// weights reads beside them: the model's shape, its generation defaults, its
// tokenizer in any of the forms transformers saves, the chat template, the
// image preprocessor of a vision model, and the index that says which shard
// holds which tensor.
var companionNames = map[string]bool{
	"config.json":                  true,
	"generation_config.json":       true,
	"tokenizer.json":               true,
	"tokenizer_config.json":        true,
	"tokenizer.model":              true,
	"special_tokens_map.json":      true,
	"added_tokens.json":            true,
	"vocab.json":                   true,
	"vocab.txt":                    true,
	"spiece.model":                 true,
	"sentencepiece.bpe.model":      true,
	"merges.txt":                   true,
	"chat_template.jinja":          true,
	"chat_template.json":           true,
	"preprocessor_config.json":     true,
	"processor_config.json":        true,
	"model.safetensors.index.json": true,
}

// Companions are the files an engine reads beside original weights, taken
// from the top of the repository only: copies in sub-folders belong to
// other variants (an "original/" checkpoint, an ONNX export). Sorted by path.
func Companions(files []File) []File {
	var out []File
	for _, f := range files {
		if companionNames[f.Path] {
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return out
}

package hf

import (
	"reflect"
	"testing"
)

// groupListing makes a listing from paths, each file's size its position plus one
// gigabyte-ish, so that sums say which files were counted.
func groupListing(paths ...string) []File {
	out := make([]File, len(paths))
	for i, p := range paths {
		out[i] = File{Path: p, Size: int64(i+1) << 30}
	}
	return out
}

// groupSetView is what an operator sees of a set in a listing.
type groupSetView struct {
	Name    string
	Quant   string
	Paths   []string
	Shards  int
	Missing []int
}

func groupView(sets []FileSet) []groupSetView {
	out := []groupSetView{}
	for _, s := range sets {
		v := groupSetView{Name: s.Name, Quant: s.Quant, Shards: s.Shards, Missing: s.Missing}
		for _, f := range s.Files {
			v.Paths = append(v.Paths, f.Path)
		}
		out = append(out, v)
	}
	return out
}

func TestGroup(t *testing.T) {
	tests := []struct {
		name  string
		files []File
		want  []groupSetView
	}{
		{
			name: "split in two, listed out of order",
			files: groupListing(
				"Qwen2.5-7B-Instruct-Q4_K_M-00002-of-00002.gguf",
				"Qwen2.5-7B-Instruct-Q4_K_M-00001-of-00002.gguf",
			),
			want: []groupSetView{{
				Name: "Qwen2.5-7B-Instruct-Q4_K_M", Quant: "Q4_K_M", Shards: 2,
				Paths: []string{
					"Qwen2.5-7B-Instruct-Q4_K_M-00001-of-00002.gguf",
					"Qwen2.5-7B-Instruct-Q4_K_M-00002-of-00002.gguf",
				},
			}},
		},
		{
			name: "joined and split copies of one quantisation are two sets, joined first",
			files: groupListing(
				"Qwen2.5-7B-Instruct-Q8_0-00001-of-00002.gguf",
				"Qwen2.5-7B-Instruct-Q8_0-00002-of-00002.gguf",
				"Qwen2.5-7B-Instruct-Q8_0.gguf",
			),
			want: []groupSetView{
				{Name: "Qwen2.5-7B-Instruct-Q8_0", Quant: "Q8_0", Shards: 1,
					Paths: []string{"Qwen2.5-7B-Instruct-Q8_0.gguf"}},
				{Name: "Qwen2.5-7B-Instruct-Q8_0", Quant: "Q8_0", Shards: 2,
					Paths: []string{
						"Qwen2.5-7B-Instruct-Q8_0-00001-of-00002.gguf",
						"Qwen2.5-7B-Instruct-Q8_0-00002-of-00002.gguf",
					}},
			},
		},
		{
			name: "shards in quantisation folders keep their folder and are not merged",
			files: groupListing(
				"Q8_0/Meta-Llama-3.1-70B-Instruct-00001-of-00002.gguf",
				"Q8_0/Meta-Llama-3.1-70B-Instruct-00002-of-00002.gguf",
				"Q6_K/Meta-Llama-3.1-70B-Instruct-00001-of-00002.gguf",
				"Q6_K/Meta-Llama-3.1-70B-Instruct-00002-of-00002.gguf",
			),
			want: []groupSetView{
				{Name: "Q6_K/Meta-Llama-3.1-70B-Instruct", Quant: "Q6_K", Shards: 2,
					Paths: []string{
						"Q6_K/Meta-Llama-3.1-70B-Instruct-00001-of-00002.gguf",
						"Q6_K/Meta-Llama-3.1-70B-Instruct-00002-of-00002.gguf",
					}},
				{Name: "Q8_0/Meta-Llama-3.1-70B-Instruct", Quant: "Q8_0", Shards: 2,
					Paths: []string{
						"Q8_0/Meta-Llama-3.1-70B-Instruct-00001-of-00002.gguf",
						"Q8_0/Meta-Llama-3.1-70B-Instruct-00002-of-00002.gguf",
					}},
			},
		},
		{
			name: "unsloth's dynamic quant in its own folder",
			files: groupListing(
				"UD-Q4_K_XL/Qwen3-235B-A22B-UD-Q4_K_XL-00001-of-00003.gguf",
				"UD-Q4_K_XL/Qwen3-235B-A22B-UD-Q4_K_XL-00002-of-00003.gguf",
				"UD-Q4_K_XL/Qwen3-235B-A22B-UD-Q4_K_XL-00003-of-00003.gguf",
			),
			want: []groupSetView{{
				Name: "UD-Q4_K_XL/Qwen3-235B-A22B-UD-Q4_K_XL", Quant: "UD-Q4_K_XL", Shards: 3,
				Paths: []string{
					"UD-Q4_K_XL/Qwen3-235B-A22B-UD-Q4_K_XL-00001-of-00003.gguf",
					"UD-Q4_K_XL/Qwen3-235B-A22B-UD-Q4_K_XL-00002-of-00003.gguf",
					"UD-Q4_K_XL/Qwen3-235B-A22B-UD-Q4_K_XL-00003-of-00003.gguf",
				},
			}},
		},
		{
			name: "a set missing its middle shard is reported with it missing",
			files: groupListing(
				"Llama-3.3-70B-Instruct-Q4_K_M-00001-of-00003.gguf",
				"Llama-3.3-70B-Instruct-Q4_K_M-00003-of-00003.gguf",
			),
			want: []groupSetView{{
				Name: "Llama-3.3-70B-Instruct-Q4_K_M", Quant: "Q4_K_M", Shards: 3, Missing: []int{2},
				Paths: []string{
					"Llama-3.3-70B-Instruct-Q4_K_M-00001-of-00003.gguf",
					"Llama-3.3-70B-Instruct-Q4_K_M-00003-of-00003.gguf",
				},
			}},
		},
		{
			name:  "a set missing its first and last shards",
			files: groupListing("big-Q2_K-00002-of-00003.gguf"),
			want: []groupSetView{{
				Name: "big-Q2_K", Quant: "Q2_K", Shards: 3, Missing: []int{1, 3},
				Paths: []string{"big-Q2_K-00002-of-00003.gguf"},
			}},
		},
		{
			name: "projectors, importance matrices and other files are not weights",
			files: groupListing(
				"README.md",
				"config.json",
				".gitattributes",
				"mmproj-model-f16.gguf",
				"gemma-3-4b-it-Q4_K_M.gguf",
				"MMPROJ-gemma-3-4b-it-F16.gguf",
				"imatrix.dat",
				"gemma-3-4b-it.imatrix.gguf",
				"gemma-3-4b-it-Q4_K_M.gguf.part1of2",
			),
			want: []groupSetView{{
				Name: "gemma-3-4b-it-Q4_K_M", Quant: "Q4_K_M", Shards: 1,
				Paths: []string{"gemma-3-4b-it-Q4_K_M.gguf"},
			}},
		},
		{
			name: "quants sorted by name whatever the listing order",
			files: groupListing(
				"Llama-3.2-1B-Instruct-Q8_0.gguf",
				"Llama-3.2-1B-Instruct-F16.gguf",
				"Llama-3.2-1B-Instruct-IQ4_XS.gguf",
			),
			want: []groupSetView{
				{Name: "Llama-3.2-1B-Instruct-F16", Quant: "F16", Shards: 1, Paths: []string{"Llama-3.2-1B-Instruct-F16.gguf"}},
				{Name: "Llama-3.2-1B-Instruct-IQ4_XS", Quant: "IQ4_XS", Shards: 1, Paths: []string{"Llama-3.2-1B-Instruct-IQ4_XS.gguf"}},
				{Name: "Llama-3.2-1B-Instruct-Q8_0", Quant: "Q8_0", Shards: 1, Paths: []string{"Llama-3.2-1B-Instruct-Q8_0.gguf"}},
			},
		},
		{
			name:  "an upper-case extension is still a GGUF file",
			files: groupListing("TinyLlama-1.1B-Chat-v1.0.Q4_0.GGUF"),
			want: []groupSetView{{Name: "TinyLlama-1.1B-Chat-v1.0.Q4_0", Quant: "Q4_0", Shards: 1,
				Paths: []string{"TinyLlama-1.1B-Chat-v1.0.Q4_0.GGUF"}}},
		},
		{
			name:  "shard numbers no tool writes leave the file on its own",
			files: groupListing("odd-00000-of-00002.gguf"),
			want: []groupSetView{{Name: "odd-00000-of-00002", Shards: 1,
				Paths: []string{"odd-00000-of-00002.gguf"}}},
		},
		{
			name: "sharded safetensors with their index and config",
			files: groupListing(
				"config.json",
				"model-00002-of-00004.safetensors",
				"model-00001-of-00004.safetensors",
				"model-00004-of-00004.safetensors",
				"model-00003-of-00004.safetensors",
				"model.safetensors.index.json",
			),
			want: []groupSetView{{
				Name: "model", Shards: 4,
				Paths: []string{
					"model-00001-of-00004.safetensors",
					"model-00002-of-00004.safetensors",
					"model-00003-of-00004.safetensors",
					"model-00004-of-00004.safetensors",
				},
			}},
		},
		{
			name:  "a single safetensors file",
			files: groupListing("model.safetensors", "tokenizer.json"),
			want:  []groupSetView{{Name: "model", Shards: 1, Paths: []string{"model.safetensors"}}},
		},
		{
			name:  "nothing to serve",
			files: groupListing("README.md", "mmproj-model-f16.gguf"),
			want:  []groupSetView{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := groupView(Group(tt.files))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Group:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestGroupBytesCountsOnlyTheSetsFiles(t *testing.T) {
	sets := Group([]File{
		{Path: "README.md", Size: 5_000},
		{Path: "m-Q4_K_M-00001-of-00002.gguf", Size: 4_000_000_000},
		{Path: "m-Q4_K_M-00002-of-00002.gguf", Size: 700_000_000},
		{Path: "mmproj-m-f16.gguf", Size: 800_000_000},
	})
	if len(sets) != 1 {
		t.Fatalf("Group made %d sets, want 1: %+v", len(sets), sets)
	}
	if sets[0].Bytes != 4_700_000_000 {
		t.Errorf("Bytes = %d, want 4700000000 (both shards, no projector)", sets[0].Bytes)
	}
}

func TestProjectors(t *testing.T) {
	got := Projectors(groupListing(
		"gemma-3-4b-it-Q4_K_M.gguf",
		"mmproj-model-f16.gguf",
		"README.md",
		"mmproj-gemma-3-4b-it-bf16.gguf",
		"mmproj-notes.txt",
	))
	want := []string{"mmproj-gemma-3-4b-it-bf16.gguf", "mmproj-model-f16.gguf"}
	var paths []string
	for _, f := range got {
		paths = append(paths, f.Path)
	}
	if !reflect.DeepEqual(paths, want) {
		t.Errorf("Projectors = %q, want %q", paths, want)
	}
}

func TestCompanions(t *testing.T) {
	got := Companions(groupListing(
		".gitattributes",
		"README.md",
		"LICENSE",
		"chat_template.jinja",
		"config.json",
		"generation_config.json",
		"merges.txt",
		"model-00001-of-00002.safetensors",
		"model-00002-of-00002.safetensors",
		"model.safetensors.index.json",
		"original/params.json",
		"original/tokenizer.model",
		"onnx/config.json",
		"preprocessor_config.json",
		"special_tokens_map.json",
		"tokenizer.json",
		"tokenizer.model",
		"tokenizer_config.json",
		"vocab.json",
	))
	want := []string{
		"chat_template.jinja",
		"config.json",
		"generation_config.json",
		"merges.txt",
		"model.safetensors.index.json",
		"preprocessor_config.json",
		"special_tokens_map.json",
		"tokenizer.json",
		"tokenizer.model",
		"tokenizer_config.json",
		"vocab.json",
	}
	var paths []string
	for _, f := range got {
		paths = append(paths, f.Path)
	}
	if !reflect.DeepEqual(paths, want) {
		t.Errorf("Companions:\n got %q\nwant %q", paths, want)
	}
}

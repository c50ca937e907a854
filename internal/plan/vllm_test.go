package plan

import (
	"context"
	"fmt"
	"modelserve/catalog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"modelserve/internal/hubtest"
	"modelserve/internal/operr"
)

// The config.json files under testdata/configs are the public ones of
// well-known models, as their repositories publish them.
func mustConfig(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "configs", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseModelConfig(t *testing.T) {
	tests := []struct {
		file string
		want ModelConfig
		kv   int64
	}{
		{"llama-3.1-8b-instruct.json", ModelConfig{Architecture: "LlamaForCausalLM", ModelType: "llama", Layers: 32, Hidden: 4096,
			Heads: 32, KVHeads: 8, HeadDim: 128, Intermediate: 14336, Vocab: 128256, MaxPosition: 131072, DType: "bfloat16"}, 128 << 10},
		{"qwen2.5-32b-instruct.json", ModelConfig{Architecture: "Qwen2ForCausalLM", ModelType: "qwen2", Layers: 64, Hidden: 5120,
			Heads: 40, KVHeads: 8, HeadDim: 128, Intermediate: 27648, Vocab: 152064, MaxPosition: 32768, DType: "bfloat16"}, 256 << 10},
		{"mixtral-8x7b-instruct-v0.1.json", ModelConfig{Architecture: "MixtralForCausalLM", ModelType: "mixtral", Layers: 32, Hidden: 4096,
			Heads: 32, KVHeads: 8, HeadDim: 128, Intermediate: 14336, Vocab: 32000, MaxPosition: 32768, DType: "bfloat16",
			Experts: 8, ExpertsUsed: 2}, 128 << 10},
		{"qwen2.5-vl-7b-instruct.json", ModelConfig{Architecture: "Qwen2_5_VLForConditionalGeneration", ModelType: "qwen2_5_vl",
			Layers: 28, Hidden: 3584, Heads: 28, KVHeads: 4, HeadDim: 128, Intermediate: 18944, Vocab: 152064, MaxPosition: 128000,
			DType: "bfloat16", Vision: true}, 56 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			c, err := ParseModelConfig(mustConfig(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if c != tt.want {
				t.Errorf("got  %+v\nwant %+v", c, tt.want)
			}
			if kv := c.KVBytesPerToken(); kv != tt.kv {
				t.Errorf("KV cache %d bytes a token, want %d", kv, tt.kv)
			}
		})
	}
	// Mixtral reads 2 of its 8 experts a token: about 13 of its 47
	// billion parameters, as Mistral's announcement says.
	c, _ := ParseModelConfig(mustConfig(t, "mixtral-8x7b-instruct-v0.1.json"))
	if s := c.activeShare(); s < 0.26 || s > 0.30 {
		t.Errorf("Mixtral reads %.2f of its weights a token; want about 13/47", s)
	}
}

func TestParseModelConfigRefusals(t *testing.T) {
	tests := []struct{ name, config, want string }{
		{"not JSON", `{"architectures": [`, "config.json cannot be planned on: it is not a JSON object"},
		{"no architectures", `{"num_hidden_layers": 2}`, "config.json cannot be planned on: it names no architectures, the model class vLLM runs"},
		{"no layers", `{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_attention_heads": 4}`,
			"config.json cannot be planned on: it gives no num_hidden_layers"},
		{"absurd layers", `{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 99999999, "hidden_size": 64, "num_attention_heads": 4}`,
			"config.json cannot be planned on: its num_hidden_layers is 99999999, not between 1 and 1024"},
		{"heads over KV heads", `{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 6, "num_key_value_heads": 4}`,
			"config.json cannot be planned on: its 6 attention heads do not share out over its 4 KV heads"},
		{"heads wider than the model", `{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 2, "num_attention_heads": 4}`,
			"config.json cannot be planned on: its hidden_size 2 is smaller than its 4 attention heads, and it gives no head_dim"},
		{"too large", `{"architectures": ["LlamaForCausalLM"], "pad": "` + strings.Repeat("x", MaxConfigBytes) + `"}`,
			"config.json cannot be planned on: it is larger than 1024 KiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseModelConfig([]byte(tt.config))
			if msg, ok := operr.Sentence(err); !ok || !strings.HasPrefix(msg, tt.want) {
				t.Errorf("error %v, want the sentence %q", err, tt.want)
			}
		})
	}
}

// vllmWorld is a Hub and a planner that reads config.json, over two nodes
// of four L4s.
func vllmWorld(t *testing.T) *world {
	t.Helper()
	return vllmWorldOn(t, `[
		{"name": "a", "cpu_cores": 32, "ram_gb": 256, "gpus": [{"class": "L4", "count": 4}]},
		{"name": "b", "cpu_cores": 32, "ram_gb": 256, "gpus": [{"class": "L4", "count": 4}]}
	]`)
}

// vllmWorldOn is vllmWorld on the nodes of a nodes file.
func vllmWorldOn(t *testing.T, nodes string) *world {
	t.Helper()
	w := newWorld(t, mustNodes(t, nodes))
	var err error
	w.planner, err = New(Config{Pool: w.planner.cfg.Pool, Headers: w.planner.cfg.Headers, DownloadURL: w.client.DownloadURL,
		Configs: ReadConfigs(w.client)})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// addOriginal serves a repository of original weights: config.json, the
// shards as their repository has them (zeros of their sizes), and what else
// such a repository holds.
func addOriginal(t *testing.T, w *world, id, config string, shards int, total int64) {
	t.Helper()
	w.hub.AddRepo(id, hubtest.RepoOptions{})
	w.hub.AddFile(id, "config.json", mustConfig(t, config))
	w.hub.AddFile(id, "generation_config.json", []byte(`{"do_sample": true, "temperature": 0.6}`))
	w.hub.AddFile(id, "tokenizer.json", []byte(`{"version": "1.0"}`))
	w.hub.AddFile(id, "tokenizer_config.json", []byte(`{"chat_template": "{{ messages }}"}`))
	w.hub.AddFile(id, "model.safetensors.index.json", []byte(`{"metadata": {}, "weight_map": {}}`))
	w.hub.AddFile(id, "README.md", []byte("# a model\n"))
	w.hub.AddFile(id, "images/benchmark.png", []byte("\x89PNG"))
	w.hub.AddFile(id, "original/params.json", []byte(`{}`))
	addZeros(t, w.hub, id, "original/consolidated.00.pth", 1<<20)
	for i := 1; i <= shards; i++ {
		addZeros(t, w.hub, id, fmt.Sprintf("model-%05d-of-%05d.safetensors", i, shards), total/int64(shards))
	}
}

// TestOriginalWeightsArePlannedFromConfigJSON plans the original weights
// of well-known models for vLLM from their own config.json: weights plus
// the KV cache of the context on each card, within the share of a card
// vLLM takes, in tensor-parallel sizes that divide the attention heads.
func TestOriginalWeightsArePlannedFromConfigJSON(t *testing.T) {
	w := vllmWorld(t)
	addOriginal(t, w, "meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b-instruct.json", 4, 16_060_556_376)
	addOriginal(t, w, "Qwen/Qwen2.5-32B-Instruct", "qwen2.5-32b-instruct.json", 17, 65_527_752_704)
	addOriginal(t, w, "Qwen/Qwen2.5-VL-7B-Instruct", "qwen2.5-vl-7b-instruct.json", 5, 16_584_333_312)
	addOriginal(t, w, "mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b-instruct-v0.1.json", 19, 93_405_585_408)

	tests := []struct {
		repo, arch string
		best       string // the first option's shape
		fit        string
		labels     []string // every option's shape
		runsOn     string   // the first, as the serve page says it
	}{
		{"meta-llama/Llama-3.1-8B-Instruct", "LlamaForCausalLM", "1×L4", FitsNow, []string{"1×L4"}, "vLLM, 1×L4"},
		{"Qwen/Qwen2.5-32B-Instruct", "Qwen2ForCausalLM", "4×L4", FitsNow, []string{"4×L4", "2×L4", "1×L4"}, "vLLM, 4×L4, tensor parallel"},
		// 28 heads: four cards slice them, eight would not.
		{"Qwen/Qwen2.5-VL-7B-Instruct", "Qwen2_5_VLForConditionalGeneration", "1×L4", FitsNow, []string{"1×L4"}, "vLLM, 1×L4"},
		{"mistralai/Mixtral-8x7B-Instruct-v0.1", "MixtralForCausalLM", "2 nodes × 4×L4", FitsNow,
			[]string{"2 nodes × 4×L4", "4×L4", "2×L4", "1×L4"}, "vLLM, 2 nodes × 4×L4, tensor and pipeline parallel"},
	}
	for _, tt := range tests {
		t.Run(tt.repo, func(t *testing.T) {
			pl, err := w.planner.Plan(context.Background(), w.repo(t, tt.repo), Request{Size: catalog.Size{Pool: 16384}, Format: FormatSafetensors})
			if err != nil {
				t.Fatal(err)
			}
			if pl.Architecture != tt.arch || pl.ModelConfig == nil || pl.KVBytesPerToken != pl.ModelConfig.KVBytesPerToken() {
				t.Fatalf("the plan read %q, config %+v; want %s from config.json", pl.Architecture, pl.ModelConfig, tt.arch)
			}
			var got []string
			for _, o := range pl.For(Original) {
				got = append(got, o.Label())
			}
			if !slices.Equal(got, tt.labels) || pl.Options[0].Label() != tt.best || pl.Options[0].Fit != tt.fit {
				t.Errorf("options %v; want %v, %s first fitting %s", labels(pl.For(Original)), tt.labels, tt.best, tt.fit)
			}
			if got := pl.Options[0].RunsOn(); got != tt.runsOn {
				t.Errorf("the serve page says it runs on %q, want %q", got, tt.runsOn)
			}
			var weights int64
			for _, set := range pl.Sets {
				if set.Format == FormatSafetensors {
					weights = set.Bytes
				}
			}
			for _, o := range pl.For(Original) {
				cards := int64(o.GPUs())
				want := weights/cards + pl.ModelConfig.KVBytesPerToken()*16384/cards + 2<<30
				if o.Engine != EngineVLLM || o.Sizing.NeedBytes != want || o.NeedGB != round2(GiB(want)) {
					t.Errorf("%s needs %d bytes (%.2f GB) a card on %s; want weights / cards + KV cache of 16384 tokens / cards + 2 GiB = %d",
						o.Label(), o.Sizing.NeedBytes, o.NeedGB, o.Engine, want)
				}
				if o.Fit == FitsNow && o.Sizing.NeedBytes > vllmCardRoom(24<<30) {
					t.Errorf("%s fits now though it needs %d bytes of an L4's %.1f GB share", o.Label(), o.Sizing.NeedBytes, 24*VLLMGPUMemoryUtilization)
				}
				if o.Sizing.HostBytes != VLLMHostBytes(o.GPUsPerNode) {
					t.Errorf("%s holds %d bytes of its node's RAM, want vLLM's %d", o.Label(), o.Sizing.HostBytes, VLLMHostBytes(o.GPUsPerNode))
				}
			}
		})
	}

	t.Run("a tensor-parallel size that does not divide the heads is refused", func(t *testing.T) {
		pl, err := w.planner.Plan(context.Background(), w.repo(t, "Qwen/Qwen2.5-VL-7B-Instruct"), Request{Format: FormatSafetensors})
		if err != nil {
			t.Fatal(err)
		}
		_, err = ChooseLayout(LayoutRequest{Format: FormatSafetensors, GPUClass: "L4", GPUsPerNode: 8}, pl, true, pl.Sets[0].FileSet)
		want := "Qwen2_5_VLForConditionalGeneration has 28 attention heads, which vLLM cannot slice over 8 cards " +
			"(tensor parallel size 8 must divide them): serve it on 1, 2, 4 cards"
		if msg, ok := operr.Sentence(err); !ok || msg != want {
			t.Errorf("ChooseLayout: %v; want %q", err, want)
		}
	})

	t.Run("pipeline parallel over nodes is refused in a sentence", func(t *testing.T) {
		repo := w.repo(t, "mistralai/Mixtral-8x7B-Instruct-v0.1")
		pl, err := w.planner.Plan(context.Background(), repo, Request{Format: FormatSafetensors})
		if err != nil {
			t.Fatal(err)
		}
		_, err = Choose(repo, pl, true, Want{Layout: LayoutRequest{Format: FormatSafetensors}})
		want := "the original weights need 2 nodes of 4×L4; multi-node serving is not supported yet: serve a GGUF file of it, or a smaller model"
		if msg, ok := operr.Sentence(err); !ok || msg != want {
			t.Errorf("Choose: %v; want %q", err, want)
		}
	})

	t.Run("what is mirrored beside the weights", func(t *testing.T) {
		repo := w.repo(t, "meta-llama/Llama-3.1-8B-Instruct")
		pl, err := w.planner.Plan(context.Background(), repo, Request{Format: FormatSafetensors})
		if err != nil {
			t.Fatal(err)
		}
		c, err := Choose(repo, pl, true, Want{Layout: LayoutRequest{Format: FormatSafetensors}})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range c.Set.Files {
			got = append(got, f.Path)
		}
		want := []string{"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors", "model-00003-of-00004.safetensors",
			"model-00004-of-00004.safetensors", "config.json", "generation_config.json", "model.safetensors.index.json",
			"tokenizer.json", "tokenizer_config.json"}
		if !slices.Equal(got, want) {
			t.Errorf("the files fetched: %v; want the weights, their config, index, tokenizer and generation config: %v", got, want)
		}
	})
}

func TestVLLMArchitectures(t *testing.T) {
	k := KnownVLLMArchitectures()
	tests := []struct {
		name, arch, image, want string
	}{
		{"old enough", "LlamaForCausalLM", "vllm/vllm-openai:v0.11.0", ""},
		{"too old", "Qwen3ForCausalLM", "vllm/vllm-openai:v0.7.3",
			"Qwen3ForCausalLM needs vLLM 0.8.4 or newer; the nodes run 0.7.3: update vLLM (--vllm-image, or the nodes' vllm), or pick a model of another architecture"},
		{"a patch release", "GptOssForCausalLM", "vllm/vllm-openai:v0.10.1.1", ""},
		{"dropped since", "MllamaForConditionalGeneration", "vllm/vllm-openai:v0.11.0",
			"MllamaForConditionalGeneration ran on vLLM up to 0.10.2, which has dropped it since; the nodes run 0.11.0: run vLLM 0.10.2 (--vllm-image, or the nodes' vllm), or pick a model of another architecture"},
		{"up to its last", "MllamaForConditionalGeneration", "vllm/vllm-openai:v0.10.2", ""},
		{"new in 0.11", "Qwen3VLForConditionalGeneration", "vllm/vllm-openai:v0.10.2",
			"Qwen3VLForConditionalGeneration needs vLLM 0.11.0 or newer; the nodes run 0.10.2: update vLLM (--vllm-image, or the nodes' vllm), or pick a model of another architecture"},
		{"the tag names no release", "Qwen3ForCausalLM", "vllm/vllm-openai:latest", ""},
		{"unknown class", "FrobnicatorForCausalLM", "vllm/vllm-openai:v0.11.0",
			"FrobnicatorForCausalLM is not a model class vLLM runs, as far as modelserve knows: serve a GGUF file of it on llama.cpp, or pick a model of another architecture"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := k.Supported(tt.arch, VLLMImageVersion(tt.image))
			msg, _ := operr.Sentence(err)
			if (err == nil) != (tt.want == "") || msg != tt.want {
				t.Errorf("Supported(%s, %s) = %v; want %q", tt.arch, tt.image, err, tt.want)
			}
		})
	}
	for image, want := range map[string]string{
		"vllm/vllm-openai:v0.11.0": "0.11.0", "vllm/vllm-openai:v0.10.1.1": "0.10.1.1", "registry.local:5000/vllm:0.9.2-cu128": "0.9.2",
		"vllm/vllm-openai:latest": "unknown", "vllm/vllm-openai@sha256:abcd": "unknown",
	} {
		if got := VLLMImageVersion(image).String(); got != want {
			t.Errorf("VLLMImageVersion(%s) = %s, want %s", image, got, want)
		}
	}
	if _, err := parseVLLMArchitectures("LlamaForCausalLM 0.1.0\nLlamaForCausalLM\n"); err == nil {
		t.Error("a class listed twice is accepted")
	}
	if _, err := parseVLLMArchitectures("LlamaForCausalLM v1\n"); err == nil {
		t.Error("a release that is not a version is accepted")
	}
	if _, err := parseVLLMArchitectures("LlamaForCausalLM 0.8.0 0.7.0\n"); err == nil {
		t.Error("a last release before the first is accepted")
	}
}

// FuzzParseModelConfig: a registry's config.json is untrusted. Whatever it
// holds, it is read or refused in a sentence, never a panic, and what is
// read is a shape the planner can size: no division by zero, no KV cache
// that overflows.
func FuzzParseModelConfig(f *testing.F) {
	for _, name := range []string{"llama-3.1-8b-instruct.json", "qwen2.5-32b-instruct.json", "mixtral-8x7b-instruct-v0.1.json", "qwen2.5-vl-7b-instruct.json"} {
		f.Add(mustConfig(f, name))
	}
	f.Add([]byte(`{"architectures": ["X"], "text_config": {"num_hidden_layers": 1, "hidden_size": 1, "num_attention_heads": 1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseModelConfig(b)
		if err != nil {
			if _, ok := operr.Sentence(err); !ok {
				t.Fatalf("refused without a sentence: %v", err)
			}
			return
		}
		if c.Heads <= 0 || c.KVHeads <= 0 || c.HeadDim <= 0 || c.Heads%c.KVHeads != 0 || c.KVBytesPerToken() <= 0 {
			t.Fatalf("read a shape that cannot be sized: %+v", c)
		}
		if s := c.activeShare(); !(s > 0 && s <= 1) {
			t.Fatalf("active share %v of %+v", s, c)
		}
		_ = TensorParallelError(&c, 8)
	})
}

// TestVLLMHoldsItsHostShare: a layout of vLLM holds vLLM's share of its
// node's RAM beside its cards (its processes and its /dev/shm), not the
// 1 GiB a llama.cpp profile that says none is taken to hold; the plan
// refuses it where no node with the cards has that RAM, in a sentence,
// and the profiles it writes say it in bytes, as the cards' need.
func TestVLLMHoldsItsHostShare(t *testing.T) {
	plan := func(t *testing.T, ramGB, freeGB int) Option {
		t.Helper()
		w := vllmWorldOn(t, fmt.Sprintf(`[{"name": "a", "cpu_cores": 32, "ram_gb": %d, "free_ram_gb": %d, "gpus": [{"class": "L4", "count": 1}]}]`, ramGB, freeGB))
		addOriginal(t, w, "meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b-instruct.json", 4, 16_060_556_376)
		pl, err := w.planner.Plan(context.Background(), w.repo(t, "meta-llama/Llama-3.1-8B-Instruct"),
			Request{Size: catalog.Size{Pool: 16384}, Format: FormatSafetensors})
		if err != nil {
			t.Fatal(err)
		}
		return option(t, pl, Original, "1×L4")
	}
	host := VLLMHostBytes(1)
	if host <= 1<<30+VLLMShmBytesPerCard {
		t.Fatalf("vLLM on one card holds %d bytes of its node's RAM, no more than llama.cpp's 1 GiB and its /dev/shm", host)
	}

	t.Run("a node whose RAM holds it", func(t *testing.T) {
		o := plan(t, 64, 60)
		if o.Fit != FitsNow || o.Sizing.HostBytes != host {
			t.Fatalf("fit %s (%s), host share %d; want it to fit now, holding %d", o.Fit, o.Why, o.Sizing.HostBytes, host)
		}
		raw := mustConfig(t, "llama-3.1-8b-instruct.json")
		_, _, profiles, err := Choice{Layouts: []Option{o}}.ServeOriginal(raw, "vllm/vllm-openai:v0.11.0", catalog.Size{Pool: 16384, Slots: 4}, Extra{})
		if err != nil {
			t.Fatal(err)
		}
		if p := profiles[0]; p.RAMBytes != host || p.HostBytes() != host || p.CardBytes != o.Sizing.NeedBytes {
			t.Errorf("the profile holds %d bytes of RAM (%d placed by) and %d of each card; want vLLM's %d and the layout's %d",
				p.RAMBytes, p.HostBytes(), p.CardBytes, host, o.Sizing.NeedBytes)
		}
	})
	t.Run("a node whose RAM is too small for it", func(t *testing.T) {
		o := plan(t, 4, 4)
		want := "a replica holds 5.4 GB of its node's RAM beside its cards, and the most a node with the cards has is 4.3 GB"
		if o.Fit != FitsNowhere || o.Why != want || o.Capable != 0 {
			t.Errorf("fit %s on %d capable nodes: %q; want it refused: %q", o.Fit, o.Capable, o.Why, want)
		}
	})
	t.Run("a node whose RAM is busy", func(t *testing.T) {
		o := plan(t, 64, 3)
		want := "a replica holds 5.4 GB of its node's RAM beside its cards, and a node with the cards free has 3.2 GB free now"
		if o.Fit != FitsHardware || o.Why != want {
			t.Errorf("fit %s: %q; want it to wait for room: %q", o.Fit, o.Why, want)
		}
	})
}

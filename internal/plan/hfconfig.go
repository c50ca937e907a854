package plan

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"modelserve/internal/operr"
)

// A repository of original weights has no GGUF header: vLLM reads the
// model's shape from its config.json, as transformers wrote it, and so does
// the planner, to size the KV cache vLLM keeps beside the weights.

// MaxConfigBytes bounds the config.json read: the largest real ones (a
// vision model's, with its processor's settings) are a few tens of KB.
const MaxConfigBytes = 1 << 20

// ModelConfig is what the planner uses of a config.json.
type ModelConfig struct {
	// Architecture is the first of its "architectures", the class vLLM
	// looks up to run it ("LlamaForCausalLM").
	Architecture string `json:"architecture"`
	ModelType    string `json:"model_type,omitempty"`
	Layers       int    `json:"layers"`
	Hidden       int    `json:"hidden_size"`
	Heads        int    `json:"attention_heads"`
	KVHeads      int    `json:"kv_heads"`
	HeadDim      int    `json:"head_dim"`
	// Intermediate is each expert's (or the dense) feed-forward width.
	Intermediate int `json:"intermediate_size,omitempty"`
	Vocab        int `json:"vocab_size,omitempty"`
	// MaxPosition is the context it was trained for
	// (max_position_embeddings), vLLM's --max-model-len when none is given.
	MaxPosition int    `json:"max_position_embeddings"`
	DType       string `json:"dtype,omitempty"`
	// Quantization is quantization_config's quant_method ("awq", "fp8").
	Quantization string `json:"quantization,omitempty"`
	Experts      int    `json:"experts,omitempty"`
	ExpertsUsed  int    `json:"experts_used,omitempty"`
	// KVLoRARank and RopeHeadDim are a multi-head latent attention's
	// (DeepSeek's): its cache holds one compressed vector a token a layer.
	KVLoRARank  int `json:"kv_lora_rank,omitempty"`
	RopeHeadDim int `json:"qk_rope_head_dim,omitempty"`
	// Vision is a model with an image encoder (vision_config).
	Vision bool `json:"vision,omitempty"`
}

// rawConfig is config.json's fields the planner reads. A multimodal
// model keeps its language model's under text_config; older ones at the
// top. Numbers are pointers so that a field absent and a field zero differ.
type rawConfig struct {
	Architectures []string `json:"architectures"`
	ModelType     string   `json:"model_type"`
	rawText
	Text   *rawText        `json:"text_config"`
	Vision json.RawMessage `json:"vision_config"`
}

type rawText struct {
	Layers       *int   `json:"num_hidden_layers"`
	Hidden       *int   `json:"hidden_size"`
	Heads        *int   `json:"num_attention_heads"`
	KVHeads      *int   `json:"num_key_value_heads"`
	HeadDim      *int   `json:"head_dim"`
	Intermediate *int   `json:"intermediate_size"`
	MoEWidth     *int   `json:"moe_intermediate_size"`
	Vocab        *int   `json:"vocab_size"`
	MaxPosition  *int   `json:"max_position_embeddings"`
	TorchDType   string `json:"torch_dtype"`
	DType        string `json:"dtype"`
	Quantization *struct {
		Method string `json:"quant_method"`
	} `json:"quantization_config"`
	LocalExperts  *int `json:"num_local_experts"`
	Experts       *int `json:"num_experts"`
	RoutedExperts *int `json:"n_routed_experts"`
	ExpertsPerTok *int `json:"num_experts_per_tok"`
	KVLoRARank    *int `json:"kv_lora_rank"`
	RopeHeadDim   *int `json:"qk_rope_head_dim"`
}

// ParseModelConfig reads a config.json. What it refuses is said in a
// sentence naming the field: a shape that cannot be right (heads that do
// not share out over the KV heads, a layer count in the millions) is not
// planned on.
func ParseModelConfig(b []byte) (ModelConfig, error) {
	if len(b) > MaxConfigBytes {
		return ModelConfig{}, invalidConfig("it is larger than %d KiB", MaxConfigBytes>>10)
	}
	var raw rawConfig
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&raw); err != nil {
		return ModelConfig{}, invalidConfig("it is not a JSON object: %v", err)
	}
	if len(raw.Architectures) == 0 || strings.TrimSpace(raw.Architectures[0]) == "" {
		return ModelConfig{}, invalidConfig("it names no architectures, the model class vLLM runs")
	}
	t := raw.rawText
	if raw.Text != nil {
		t = raw.Text.over(t)
	}
	c := ModelConfig{
		Architecture: raw.Architectures[0], ModelType: raw.ModelType,
		Layers: val(t.Layers), Hidden: val(t.Hidden), Heads: val(t.Heads), KVHeads: val(t.KVHeads),
		HeadDim: val(t.HeadDim), Intermediate: val(t.Intermediate), Vocab: val(t.Vocab),
		MaxPosition: val(t.MaxPosition), DType: firstOf(t.DType, t.TorchDType),
		Experts:     firstInt(t.LocalExperts, t.Experts, t.RoutedExperts),
		ExpertsUsed: val(t.ExpertsPerTok), KVLoRARank: val(t.KVLoRARank), RopeHeadDim: val(t.RopeHeadDim),
		Vision: len(raw.Vision) > 0 && string(raw.Vision) != "null",
	}
	if t.Quantization != nil {
		c.Quantization = t.Quantization.Method
	}
	if c.Experts > 1 && t.MoEWidth != nil {
		c.Intermediate = *t.MoEWidth
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads // multi-head attention: a KV head for each
	}
	for _, f := range []struct {
		name      string
		v, lo, hi int
	}{
		{"num_hidden_layers", c.Layers, 1, 1024},
		{"hidden_size", c.Hidden, 1, 1 << 17},
		{"num_attention_heads", c.Heads, 1, 1024},
		{"num_key_value_heads", c.KVHeads, 1, 1024},
		{"max_position_embeddings", c.MaxPosition, 0, 1 << 24},
		{"head_dim", c.HeadDim, 0, 4096},
		{"intermediate_size", c.Intermediate, 0, 1 << 20},
		{"vocab_size", c.Vocab, 0, 1 << 22},
		{"the expert count", c.Experts, 0, 1 << 12},
		{"num_experts_per_tok", c.ExpertsUsed, 0, 1 << 12},
		{"kv_lora_rank", c.KVLoRARank, 0, 1 << 16},
		{"qk_rope_head_dim", c.RopeHeadDim, 0, 4096},
	} {
		if f.v < f.lo || f.v > f.hi {
			if f.v == 0 {
				return ModelConfig{}, invalidConfig("it gives no %s", f.name)
			}
			return ModelConfig{}, invalidConfig("its %s is %d, not between %d and %d", f.name, f.v, f.lo, f.hi)
		}
	}
	if c.Heads%c.KVHeads != 0 {
		return ModelConfig{}, invalidConfig("its %d attention heads do not share out over its %d KV heads", c.Heads, c.KVHeads)
	}
	if c.HeadDim == 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if c.HeadDim == 0 {
		return ModelConfig{}, invalidConfig("its hidden_size %d is smaller than its %d attention heads, and it gives no head_dim", c.Hidden, c.Heads)
	}
	return c, nil
}

// over is t with what it lacks taken from the top level's fields.
func (t rawText) over(top rawText) rawText {
	pick := func(a, b *int) *int {
		if a != nil {
			return a
		}
		return b
	}
	t.Layers, t.Hidden, t.Heads, t.KVHeads = pick(t.Layers, top.Layers), pick(t.Hidden, top.Hidden), pick(t.Heads, top.Heads), pick(t.KVHeads, top.KVHeads)
	t.HeadDim, t.Intermediate, t.MoEWidth = pick(t.HeadDim, top.HeadDim), pick(t.Intermediate, top.Intermediate), pick(t.MoEWidth, top.MoEWidth)
	t.Vocab, t.MaxPosition = pick(t.Vocab, top.Vocab), pick(t.MaxPosition, top.MaxPosition)
	t.LocalExperts, t.Experts, t.RoutedExperts = pick(t.LocalExperts, top.LocalExperts), pick(t.Experts, top.Experts), pick(t.RoutedExperts, top.RoutedExperts)
	t.ExpertsPerTok, t.KVLoRARank, t.RopeHeadDim = pick(t.ExpertsPerTok, top.ExpertsPerTok), pick(t.KVLoRARank, top.KVLoRARank), pick(t.RopeHeadDim, top.RopeHeadDim)
	t.TorchDType, t.DType = firstOf(t.TorchDType, top.TorchDType), firstOf(t.DType, top.DType)
	if t.Quantization == nil {
		t.Quantization = top.Quantization
	}
	return t
}

// kvCacheDTypeBytes is what vLLM keeps a cached key or value in: the
// model's own 16-bit type (its default --kv-cache-dtype, "auto"; a 32-bit
// checkpoint is served in 16 bits too).
const kvCacheDTypeBytes = 2

// KVBytesPerToken is what vLLM's KV cache holds for each token: a key and
// a value per KV head per layer, or for a latent attention one compressed
// vector and its rotary part per layer.
func (c ModelConfig) KVBytesPerToken() int64 {
	if c.KVLoRARank > 0 {
		return int64(c.Layers) * int64(c.KVLoRARank+c.RopeHeadDim) * kvCacheDTypeBytes
	}
	return 2 * int64(c.Layers) * int64(c.KVHeads) * int64(c.HeadDim) * kvCacheDTypeBytes
}

// activeShare is the part of the weights each token reads: all of them for
// a dense model; for a mixture of experts, all but the unused experts'
// feed-forward weights (three matrices of hidden × intermediate each).
func (c ModelConfig) activeShare() float64 {
	if c.Experts <= 1 || c.ExpertsUsed <= 0 || c.Intermediate == 0 {
		return 1
	}
	d, kv := float64(c.Hidden), float64(c.KVHeads*c.HeadDim)
	layer := 2*d*float64(c.Heads*c.HeadDim) + 2*d*kv // query and output, key and value
	experts := float64(c.Layers) * float64(c.Experts) * 3 * d * float64(c.Intermediate)
	total := experts + float64(c.Layers)*layer + 2*float64(c.Vocab)*d
	share := experts / total
	return (1 - share) + share*float64(c.ExpertsUsed)/float64(c.Experts)
}

// ConfigReader reads a repository's config.json from a URL (a registry's
// download URL, as Config.DownloadURL gives it), at most MaxConfigBytes+1
// of it.
type ConfigReader func(ctx context.Context, url string) ([]byte, error)

// ReadConfigs is the ConfigReader for a registry.
func ReadConfigs(reg Opener) ConfigReader {
	return func(ctx context.Context, url string) ([]byte, error) {
		b, err := reg.Open(ctx, url, 0, 0)
		if err != nil {
			return nil, err
		}
		defer b.Close()
		return io.ReadAll(io.LimitReader(b, MaxConfigBytes+1))
	}
}

func invalidConfig(format string, args ...any) error {
	return operr.New(operr.Refused, "config.json cannot be planned on: "+format, args...)
}

func val(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func firstInt(ps ...*int) int {
	for _, p := range ps {
		if p != nil && *p > 0 {
			return *p
		}
	}
	return 0
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// String is the shape in a few words, for a sentence.
func (c ModelConfig) String() string {
	return fmt.Sprintf("%s, %d layers, %d attention heads (%d KV)", c.Architecture, c.Layers, c.Heads, c.KVHeads)
}

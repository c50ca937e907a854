package ggufgen

import (
	"fmt"
	"strings"
)

// defaultWords make the tiny model's vocabulary look like a language's, so
// that a prompt tokenizes into words as well as bytes.
var defaultWords = strings.Fields(`the a of and to in is it you that he was for on are
with as his they be at one have this from hello world good day time what how
who model`)

// Token types, as llama.cpp numbers them (LLAMA_TOKEN_TYPE_*).
const (
	tokenNormal  int32 = 1
	tokenUnknown int32 = 2
	tokenControl int32 = 3
	tokenByte    int32 = 6
)

// vocabulary is an SPM vocabulary llama.cpp can tokenize anything with:
// <unk>, <s>, </s>, then all 256 byte tokens (llama.cpp aborts on a byte
// fallback to a missing one), then the words, each prefixed with "▁". SPM
// builds a word by merging adjacent pieces that are themselves tokens, so
// every prefix of a word ("▁t", "▁th") comes before it; without them no
// word is ever reached and all text falls back to bytes.
func vocabulary(s Spec) (tokens []string, scores []float32, types []int32) {
	add := func(tok string, score float32, typ int32) {
		tokens = append(tokens, tok)
		scores = append(scores, score)
		types = append(types, typ)
	}
	add("<unk>", 0, tokenUnknown)
	add("<s>", 0, tokenControl)
	add("</s>", 0, tokenControl)
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b), 0, tokenByte)
	}
	words := s.Vocab
	if len(words) == 0 {
		words = defaultWords
	}
	seen := make(map[string]bool, len(tokens)+len(words))
	for _, t := range tokens {
		seen[t] = true
	}
	for _, w := range words {
		word := []rune("▁" + strings.TrimPrefix(w, "▁"))
		for n := 2; n <= len(word); n++ {
			tok := string(word[:n])
			if seen[tok] {
				continue
			}
			seen[tok] = true
			add(tok, -float32(len(tokens)), tokenNormal)
		}
	}
	for i := 0; len(tokens) < s.VocabSize; i++ {
		tok := fmt.Sprintf("▁w%d", i)
		if seen[tok] {
			continue
		}
		add(tok, -float32(len(tokens)), tokenNormal)
	}
	return tokens, scores, types
}

// build is the file s (with its defaults) describes.
func build(s Spec) *file {
	if s.Projector {
		return buildProjector(s)
	}
	arch := s.Architecture
	headK, headV := s.KeyLength, s.ValueLength
	if headK == 0 {
		headK = s.EmbeddingLength / s.HeadCount
	}
	if headV == 0 {
		headV = s.EmbeddingLength / s.HeadCount
	}

	f := &file{alignment: uint64(s.Alignment), shapeOnly: s.ShapeOnly}
	add := func(key string, v any) { f.kvs = append(f.kvs, kv{key, v}) }
	if !s.NoArchitecture {
		add("general.architecture", arch)
	}
	add("general.name", s.Name)
	add("general.file_type", s.FileType)
	if s.Alignment != 32 {
		add("general.alignment", s.Alignment)
	}
	add(arch+".context_length", s.ContextLength)
	add(arch+".embedding_length", s.EmbeddingLength)
	add(arch+".block_count", s.BlockCount)
	add(arch+".feed_forward_length", s.FeedForwardLength)
	add(arch+".attention.head_count", s.HeadCount)
	add(arch+".attention.head_count_kv", s.HeadCountKV)
	if s.KeyLength != 0 {
		add(arch+".attention.key_length", s.KeyLength)
	}
	if s.ValueLength != 0 {
		add(arch+".attention.value_length", s.ValueLength)
	}
	// llama.cpp refuses a llama model whose rotary dimensions differ from
	// its key head size.
	add(arch+".rope.dimension_count", headK)
	add(arch+".rope.freq_base", float32(10000))
	add(arch+".attention.layer_norm_rms_epsilon", float32(1e-5))
	if s.ExpertCount > 0 {
		add(arch+".expert_count", s.ExpertCount)
		add(arch+".expert_used_count", s.ExpertUsedCount)
	}
	if s.Pooling != nil {
		add(arch+".pooling_type", *s.Pooling)
	}
	tokens, scores, types := vocabulary(s)
	add("tokenizer.ggml.model", "llama")
	add("tokenizer.ggml.tokens", tokens)
	add("tokenizer.ggml.scores", scores)
	add("tokenizer.ggml.token_type", types)
	add("tokenizer.ggml.unknown_token_id", uint32(0))
	add("tokenizer.ggml.bos_token_id", uint32(1))
	add("tokenizer.ggml.eos_token_id", uint32(2))
	add("tokenizer.ggml.add_bos_token", true)
	add("tokenizer.ggml.add_eos_token", false)
	if s.ChatTemplate != "" {
		add("tokenizer.chat_template", s.ChatTemplate)
	}

	embd, ff, vocab := uint64(s.EmbeddingLength), uint64(s.FeedForwardLength), uint64(len(tokens))
	qDim := uint64(s.HeadCount) * uint64(headK)
	kDim := uint64(s.HeadCountKV) * uint64(headK)
	vDim := uint64(s.HeadCountKV) * uint64(headV)
	oDim := uint64(s.HeadCount) * uint64(headV)
	matrix := func(name string, dims ...uint64) {
		f.tensors = append(f.tensors, tensor{name: name, dims: dims, typ: s.TensorType})
	}
	vector := func(name string, n uint64, init weights) {
		f.tensors = append(f.tensors, tensor{name: name, dims: []uint64{n}, typ: F32, init: init})
	}
	matrix("token_embd.weight", embd, vocab)
	for i := range s.BlockCount {
		blk := fmt.Sprintf("blk.%d.", i)
		vector(blk+"attn_norm.weight", embd, ones)
		matrix(blk+"attn_q.weight", embd, qDim)
		matrix(blk+"attn_k.weight", embd, kDim)
		matrix(blk+"attn_v.weight", embd, vDim)
		if arch == "qwen2" {
			// Qwen2 has biases on its query, key and value projections.
			vector(blk+"attn_q.bias", qDim, random)
			vector(blk+"attn_k.bias", kDim, random)
			vector(blk+"attn_v.bias", vDim, random)
		}
		matrix(blk+"attn_output.weight", oDim, embd)
		vector(blk+"ffn_norm.weight", embd, ones)
		if s.ExpertCount > 0 {
			n := uint64(s.ExpertCount)
			f.tensors = append(f.tensors, tensor{name: blk + "ffn_gate_inp.weight", dims: []uint64{embd, n}, typ: F32})
			matrix(blk+"ffn_gate_exps.weight", embd, ff, n)
			matrix(blk+"ffn_down_exps.weight", ff, embd, n)
			matrix(blk+"ffn_up_exps.weight", embd, ff, n)
			continue
		}
		matrix(blk+"ffn_gate.weight", embd, ff)
		matrix(blk+"ffn_down.weight", ff, embd)
		matrix(blk+"ffn_up.weight", embd, ff)
	}
	vector("output_norm.weight", embd, ones)
	matrix("output.weight", embd, vocab)
	return f
}

// buildProjector is a vision projector as llama.cpp's converter writes one
// for a LLaVA-style model: a small CLIP vision encoder and an MLP that maps
// its output to the language model's embedding width.
func buildProjector(s Spec) *file {
	const (
		image = 32
		patch = 16
	)
	embd, ff, proj := uint64(s.EmbeddingLength), uint64(s.FeedForwardLength), uint64(s.EmbeddingLength)
	f := &file{alignment: uint64(s.Alignment), shapeOnly: s.ShapeOnly}
	add := func(key string, v any) { f.kvs = append(f.kvs, kv{key, v}) }
	add("general.architecture", "clip")
	add("general.type", "mmproj")
	add("general.name", s.Name)
	add("general.file_type", s.FileType)
	add("clip.projector_type", "mlp")
	add("clip.has_text_encoder", false)
	add("clip.has_vision_encoder", true)
	add("clip.has_llava_projector", true)
	add("clip.use_gelu", true)
	add("clip.vision.image_size", uint32(image))
	add("clip.vision.patch_size", uint32(patch))
	add("clip.vision.embedding_length", s.EmbeddingLength)
	add("clip.vision.feed_forward_length", s.FeedForwardLength)
	add("clip.vision.projection_dim", uint32(proj))
	add("clip.vision.block_count", s.BlockCount)
	add("clip.vision.attention.head_count", s.HeadCount)
	add("clip.vision.attention.layer_norm_epsilon", float32(1e-6))
	add("clip.vision.image_mean", []float32{0.5, 0.5, 0.5})
	add("clip.vision.image_std", []float32{0.5, 0.5, 0.5})

	positions := uint64(image/patch)*uint64(image/patch) + 1
	matrix := func(name string, dims ...uint64) {
		f.tensors = append(f.tensors, tensor{name: name, dims: dims, typ: s.TensorType})
	}
	vector := func(name string, n uint64, init weights) {
		f.tensors = append(f.tensors, tensor{name: name, dims: []uint64{n}, typ: F32, init: init})
	}
	vector("v.class_embd", embd, random)
	f.tensors = append(f.tensors, tensor{name: "v.patch_embd.weight", dims: []uint64{patch, patch, 3, embd}, typ: F32})
	matrix("v.position_embd.weight", embd, positions)
	vector("v.pre_ln.weight", embd, ones)
	vector("v.pre_ln.bias", embd, random)
	for i := range s.BlockCount {
		blk := fmt.Sprintf("v.blk.%d.", i)
		for _, t := range []string{"attn_q", "attn_k", "attn_v", "attn_out"} {
			matrix(blk+t+".weight", embd, embd)
			vector(blk+t+".bias", embd, random)
		}
		vector(blk+"ln1.weight", embd, ones)
		vector(blk+"ln1.bias", embd, random)
		matrix(blk+"ffn_up.weight", embd, ff)
		vector(blk+"ffn_up.bias", ff, random)
		matrix(blk+"ffn_down.weight", ff, embd)
		vector(blk+"ffn_down.bias", embd, random)
		vector(blk+"ln2.weight", embd, ones)
		vector(blk+"ln2.bias", embd, random)
	}
	matrix("mm.0.weight", embd, proj)
	vector("mm.0.bias", proj, random)
	matrix("mm.2.weight", proj, proj)
	vector("mm.2.bias", proj, random)
	return f
}

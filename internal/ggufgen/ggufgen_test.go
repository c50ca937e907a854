package ggufgen

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	parser "github.com/gpustack/gguf-parser-go"
)

// mustWrite writes s into a temporary directory and returns its path.
func mustWrite(t *testing.T, name string, s Spec) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := WriteFile(path, s); err != nil {
		t.Fatalf("write %s: %v", name, err)
	}
	return path
}

func mustParse(t *testing.T, path string, opts ...parser.GGUFReadOption) *parser.GGUFFile {
	t.Helper()
	f, err := parser.ParseGGUFFile(path, opts...)
	if err != nil {
		t.Fatalf("gguf-parser-go refused %s: %v", filepath.Base(path), err)
	}
	return f
}

// chatTemplate is the file's tokenizer.chat_template, which the parser's
// Tokenizer does not read.
func chatTemplate(f *parser.GGUFFile) string {
	kv, ok := f.Header.MetadataKV.Get("tokenizer.chat_template")
	if !ok {
		return ""
	}
	return kv.ValueString()
}

// diskBytes is what a file really takes on disk, holes not counted.
func diskBytes(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		t.Skip("this system does not say how many blocks a file takes")
	}
	return st.Blocks * 512
}

// tinyVocab is the default vocabulary's size: 3 special tokens, 256 byte
// tokens, and the 76 distinct prefixes ("▁t", "▁th", "▁the", ...) of the
// 34 default words.
const tinyVocab = 335

func TestWrittenValuesReadBack(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		// want, with the tiny model's defaults where the spec says nothing.
		arch                              string
		ctx, embd, blocks, heads, kvHeads uint64
		keyLen, valueLen                  uint32
		pooling                           uint32
		fileType                          uint32
		experts, expertsUsed              uint32
		template                          string
		tensors                           uint64
		vocab                             uint64
	}{
		{
			name: "tiny llama defaults", spec: Spec{},
			arch: "llama", ctx: 4096, embd: 64, blocks: 2, heads: 4, kvHeads: 2, keyLen: 16, valueLen: 16,
			tensors: 3 + 2*9, vocab: tinyVocab,
		},
		{
			name: "shape given", spec: Spec{ContextLength: 8192, EmbeddingLength: 32, BlockCount: 3, FeedForwardLength: 96, HeadCount: 8, HeadCountKV: 8},
			arch: "llama", ctx: 8192, embd: 32, blocks: 3, heads: 8, kvHeads: 8, keyLen: 4, valueLen: 4,
			tensors: 3 + 3*9, vocab: tinyVocab,
		},
		{
			name: "key and value length", spec: Spec{KeyLength: 32, ValueLength: 24},
			arch: "llama", ctx: 4096, embd: 64, blocks: 2, heads: 4, kvHeads: 2, keyLen: 32, valueLen: 24,
			tensors: 3 + 2*9, vocab: tinyVocab,
		},
		{
			name: "embedding model", spec: Spec{Pooling: new(uint32(1))},
			arch: "llama", ctx: 4096, embd: 64, blocks: 2, heads: 4, kvHeads: 2, keyLen: 16, valueLen: 16, pooling: 1,
			tensors: 3 + 2*9, vocab: tinyVocab,
		},
		{
			name: "f16 with file type", spec: Spec{TensorType: F16},
			arch: "llama", ctx: 4096, embd: 64, blocks: 2, heads: 4, kvHeads: 2, keyLen: 16, valueLen: 16, fileType: 1,
			tensors: 3 + 2*9, vocab: tinyVocab,
		},
		{
			name: "file type as given", spec: Spec{FileType: 7},
			arch: "llama", ctx: 4096, embd: 64, blocks: 2, heads: 4, kvHeads: 2, keyLen: 16, valueLen: 16, fileType: 7,
			tensors: 3 + 2*9, vocab: tinyVocab,
		},
		{
			name: "chat template", spec: Spec{ChatTemplate: "{% for m in messages %}{{ m.content }}{% endfor %}"},
			arch: "llama", ctx: 4096, embd: 64, blocks: 2, heads: 4, kvHeads: 2, keyLen: 16, valueLen: 16,
			template: "{% for m in messages %}{{ m.content }}{% endfor %}",
			tensors:  3 + 2*9, vocab: tinyVocab,
		},
		{
			name: "mixture of experts", spec: Spec{ExpertCount: 4, ExpertUsedCount: 2, FeedForwardLength: 64},
			arch: "llama", ctx: 4096, embd: 64, blocks: 2, heads: 4, kvHeads: 2, keyLen: 16, valueLen: 16,
			experts: 4, expertsUsed: 2,
			tensors: 3 + 2*10, vocab: tinyVocab,
		},
		{
			name: "qwen2 with biases", spec: Spec{Architecture: "qwen2"},
			arch: "qwen2", ctx: 4096, embd: 64, blocks: 2, heads: 4, kvHeads: 2, keyLen: 16, valueLen: 16,
			tensors: 3 + 2*12, vocab: tinyVocab,
		},
		{
			name: "own words", spec: Spec{Vocab: []string{"hello", "▁world", "hello"}},
			arch: "llama", ctx: 4096, embd: 64, blocks: 2, heads: 4, kvHeads: 2, keyLen: 16, valueLen: 16,
			tensors: 3 + 2*9, vocab: 259 + 5 + 5,
		},
		{
			name: "own words and vocabulary size", spec: Spec{Vocab: []string{"hello", "▁world", "hello"}, VocabSize: 400},
			arch: "llama", ctx: 4096, embd: 64, blocks: 2, heads: 4, kvHeads: 2, keyLen: 16, valueLen: 16,
			tensors: 3 + 2*9, vocab: 400,
		},
		{
			name: "unknown architecture", spec: Spec{Architecture: "foo"},
			arch: "foo", ctx: 4096, embd: 64, blocks: 2, heads: 4, kvHeads: 2, keyLen: 16, valueLen: 16,
			tensors: 3 + 2*9, vocab: tinyVocab,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := mustWrite(t, "model.gguf", tc.spec)
			f := mustParse(t, path)

			kv, ok := f.Header.MetadataKV.Get("general.architecture")
			if !ok || kv.ValueString() != tc.arch {
				t.Errorf("general.architecture = %v (present %v), want %q", kv.Value, ok, tc.arch)
			}
			a := f.Architecture()
			got := []uint64{a.MaximumContextLength, a.EmbeddingLength, a.BlockCount, a.AttentionHeadCount, a.AttentionHeadCountKV}
			want := []uint64{tc.ctx, tc.embd, tc.blocks, tc.heads, tc.kvHeads}
			for i, what := range []string{"context", "embedding", "blocks", "heads", "kv heads"} {
				if got[i] != want[i] {
					t.Errorf("%s = %d, want %d", what, got[i], want[i])
				}
			}
			if a.AttentionKeyLength != tc.keyLen || a.AttentionValueLength != tc.valueLen {
				t.Errorf("key/value length = %d/%d, want %d/%d", a.AttentionKeyLength, a.AttentionValueLength, tc.keyLen, tc.valueLen)
			}
			if a.PoolingType != tc.pooling {
				t.Errorf("pooling = %d, want %d", a.PoolingType, tc.pooling)
			}
			if _, ok := f.Header.MetadataKV.Get(tc.arch + ".pooling_type"); ok != (tc.spec.Pooling != nil) {
				t.Errorf("pooling key present = %v, want %v", ok, tc.spec.Pooling != nil)
			}
			if kv, ok := f.Header.MetadataKV.Get("general.file_type"); !ok || kv.ValueUint32() != tc.fileType {
				t.Errorf("general.file_type = %v, want %d", kv.Value, tc.fileType)
			}
			if a.ExpertCount != tc.experts || a.ExpertUsedCount != tc.expertsUsed {
				t.Errorf("experts = %d of %d, want %d of %d", a.ExpertUsedCount, a.ExpertCount, tc.expertsUsed, tc.experts)
			}
			if got := chatTemplate(f); got != tc.template {
				t.Errorf("chat template = %q, want %q", got, tc.template)
			}
			if tok := f.Tokenizer(); uint64(tok.TokensLength) != tc.vocab || a.VocabularyLength != tc.vocab {
				t.Errorf("vocabulary = %d tokens (architecture says %d), want %d", tok.TokensLength, a.VocabularyLength, tc.vocab)
			}
			if f.Header.TensorCount != tc.tensors || uint64(len(f.TensorInfos)) != tc.tensors {
				t.Errorf("tensors = %d (%d infos), want %d", f.Header.TensorCount, len(f.TensorInfos), tc.tensors)
			}
			if f.Size > 1<<20 {
				t.Errorf("file is %d bytes, want a tiny model under 1 MiB", f.Size)
			}
		})
	}
}

// TestLayout checks what the parser does not: each tensor's offset is the
// running sum of those before it, padded to the alignment, and the data
// region starts on the alignment.
func TestLayout(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
	}{
		{"default alignment", Spec{}},
		{"alignment 64", Spec{Alignment: 64}},
		{"f16", Spec{TensorType: F16}},
		{"shape only", Spec{ShapeOnly: true, TensorType: Q8_0}},
		{"projector", Spec{Projector: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := mustParse(t, mustWrite(t, "m.gguf", tc.spec))
			align := uint64(32)
			if tc.spec.Alignment != 0 {
				align = uint64(tc.spec.Alignment)
			}
			if f.TensorDataStartOffset%int64(align) != 0 {
				t.Errorf("data starts at %d, not on the %d-byte alignment", f.TensorDataStartOffset, align)
			}
			var next uint64
			for _, ti := range f.TensorInfos {
				if ti.Offset != next {
					t.Fatalf("tensor %s at %d, want %d", ti.Name, ti.Offset, next)
				}
				next = alignUp(next+ti.Bytes(), align)
			}
			if want := uint64(f.TensorDataStartOffset) + next; uint64(f.Size) != want {
				t.Errorf("file is %d bytes, want %d (data start %d + %d of data)", f.Size, want, f.TensorDataStartOffset, next)
			}
		})
	}
}

func TestWeightsAreSmallAndVaried(t *testing.T) {
	b := Bytes(Spec{})
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f := mustParse(t, path)
	read := func(name string) []float32 {
		ti, ok := f.TensorInfos.Get(name)
		if !ok {
			t.Fatalf("no tensor %s", name)
		}
		start := uint64(f.TensorDataStartOffset) + ti.Offset
		out := make([]float32, ti.Elements())
		if err := binary.Read(bytes.NewReader(b[start:start+ti.Bytes()]), binary.LittleEndian, out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, v := range read("blk.1.ffn_norm.weight") {
		if v != 1 {
			t.Fatalf("norm weight %v, want 1", v)
		}
	}
	w := read("blk.0.attn_q.weight")
	distinct := map[float32]bool{}
	for _, v := range w {
		if v < -0.02 || v > 0.02 {
			t.Fatalf("weight %v outside ±0.02", v)
		}
		distinct[v] = true
	}
	if len(distinct) < len(w)/2 {
		t.Errorf("%d distinct values in %d weights: degenerate", len(distinct), len(w))
	}
	if !bytes.Equal(b, Bytes(Spec{})) {
		t.Error("two writes of the same spec differ")
	}
	if len(b) > 1<<20 {
		t.Errorf("tiny model is %d bytes, want under 1 MiB", len(b))
	}
}

func TestFloat16(t *testing.T) {
	tests := []struct {
		name string
		in   float32
		want uint16
	}{
		{"zero", 0, 0x0000},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000},
		{"one", 1, 0x3c00},
		{"minus two", -2, 0xc000},
		{"a weight", 0.02, 0x251f},
		{"largest", 65504, 0x7bff},
		{"overflow", 1e6, 0x7c00},
		{"smallest normal", 6.103515625e-05, 0x0400},
		{"subnormal", 1e-7, 0x0002},
		{"underflow", 1e-9, 0x0000},
		{"tie to even", 1 + 1.0/2048, 0x3c00},
		{"round up", 1 + 3.0/2048, 0x3c02},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := float16(tc.in); got != tc.want {
				t.Errorf("float16(%v) = %#04x, want %#04x", tc.in, got, tc.want)
			}
		})
	}
}

func TestSplit(t *testing.T) {
	dir := t.TempDir()
	spec := Spec{ChatTemplate: "{{ messages }}"}
	paths, err := WriteSplit(dir, "tiny", spec, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"tiny-00001-of-00003.gguf", "tiny-00002-of-00003.gguf", "tiny-00003-of-00003.gguf"} {
		if filepath.Base(paths[i]) != want {
			t.Errorf("shard %d is %s, want %s", i, filepath.Base(paths[i]), want)
		}
	}
	whole := mustParse(t, mustWrite(t, "whole.gguf", spec))

	// Given any shard's name, the parser merges the set.
	merged := mustParse(t, paths[1])
	if len(merged.TensorInfos) != len(whole.TensorInfos) || merged.ModelParameters != whole.ModelParameters {
		t.Errorf("merged set has %d tensors, %d parameters; the whole file %d, %d",
			len(merged.TensorInfos), merged.ModelParameters, len(whole.TensorInfos), whole.ModelParameters)
	}
	if a := merged.Architecture(); a.Architecture != "llama" || a.BlockCount != 2 || chatTemplate(merged) != "{{ messages }}" {
		t.Errorf("merged set reads as %s with %d blocks, template %q", a.Architecture, a.BlockCount, chatTemplate(merged))
	}

	// Each shard on its own (copied to a name that is not a shard's, so the
	// parser reads it alone) says which it is.
	total := 0
	for i, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		alone := filepath.Join(t.TempDir(), "alone.gguf")
		if err := os.WriteFile(alone, b, 0o644); err != nil {
			t.Fatal(err)
		}
		f := mustParse(t, alone)
		get := func(key string) (parser.GGUFMetadataKV, bool) { return f.Header.MetadataKV.Get(key) }
		count, ok1 := get("split.count")
		tensors, ok2 := get("split.tensors.count")
		if !ok1 || !ok2 {
			t.Fatalf("shard %d lacks split.count or split.tensors.count", i+1)
		}
		if count.ValueType != parser.GGUFMetadataValueTypeUint16 || tensors.ValueType != parser.GGUFMetadataValueTypeInt32 {
			t.Errorf("shard %d split key types %v %v, want uint16 int32", i+1, count.ValueType, tensors.ValueType)
		}
		if count.ValueUint16() != 3 || int(tensors.ValueInt32()) != len(whole.TensorInfos) {
			t.Errorf("shard %d says %d shards, %d tensors", i+1, count.ValueUint16(), tensors.ValueInt32())
		}
		if no, ok := splitNo(b); !ok || no != uint16(i) {
			t.Errorf("shard %d has split.no %d (found %v), want %d", i+1, no, ok, i)
		}
		_, hasArch := get("general.architecture")
		if hasArch != (i == 0) {
			t.Errorf("shard %d has general.architecture: %v; only the first should", i+1, hasArch)
		}
		if len(f.TensorInfos) == 0 {
			t.Errorf("shard %d holds no tensors", i+1)
		}
		total += len(f.TensorInfos)
	}
	if total != len(whole.TensorInfos) {
		t.Errorf("shards hold %d tensors, want %d", total, len(whole.TensorInfos))
	}

	// A missing shard fails the merge, as the contract says.
	if err := os.Remove(paths[2]); err != nil {
		t.Fatal(err)
	}
	if _, err := parser.ParseGGUFFile(paths[0]); err == nil {
		t.Error("a set with a missing shard parsed")
	}
}

// splitNo finds the u16 split.no in a shard's bytes: the parser drops the
// key when it reads a shard.
func splitNo(b []byte) (uint16, bool) {
	key := binary.LittleEndian.AppendUint64(nil, uint64(len("split.no")))
	key = append(key, "split.no"...)
	i := bytes.Index(b, key)
	if i < 0 || len(b) < i+len(key)+6 {
		return 0, false
	}
	v := b[i+len(key):]
	if binary.LittleEndian.Uint32(v) != 2 { // GGUF value type 2 is u16
		return 0, false
	}
	return binary.LittleEndian.Uint16(v[4:]), true
}

func TestShapeOnlyRealModels(t *testing.T) {
	tests := []struct {
		name           string
		spec           Spec
		arch           string
		ctx            uint64
		params         float64 // billions
		kvHeads, heads uint64
	}{
		{"Llama-3.1-8B", Llama8B(), "llama", 131072, 8.03, 8, 32},
		{"Qwen2.5-7B", Qwen7B(), "qwen2", 32768, 7.62, 4, 28},
		{"Mistral-7B", Mistral7B(), "llama", 32768, 7.25, 8, 32},
		{"Llama-3.1-70B", Llama70B(), "llama", 131072, 70.55, 8, 64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := mustWrite(t, "model.gguf", tc.spec)
			// Reading 150 thousand token strings one by one takes the
			// parser seconds; their count is all that is needed.
			f := mustParse(t, path, parser.SkipLargeMetadata(), parser.UseMMap())
			a := f.Architecture()
			if a.Architecture != tc.arch || a.MaximumContextLength != tc.ctx || a.AttentionHeadCount != tc.heads || a.AttentionHeadCountKV != tc.kvHeads {
				t.Errorf("read %s ctx %d, %d heads, %d kv heads", a.Architecture, a.MaximumContextLength, a.AttentionHeadCount, a.AttentionHeadCountKV)
			}
			got := float64(f.ModelParameters) / 1e9
			if math.Abs(got-tc.params)/tc.params > 0.005 {
				t.Errorf("%.3f billion parameters, want %.2f", got, tc.params)
			}
			// Q4_K is 4.5 bits a weight.
			if bpw := float64(f.ModelBitsPerWeight); bpw < 4.4 || bpw > 4.7 {
				t.Errorf("%.2f bits per weight, want about 4.5", bpw)
			}
			if disk := diskBytes(t, path); disk > 16<<20 {
				t.Errorf("a %.1f GB shape-only file takes %d MiB of disk", float64(f.Size)/1e9, disk>>20)
			}
		})
	}
}

func TestShapeOnlyHolesMatchZeros(t *testing.T) {
	// Big enough that the data is skipped as holes in a file and written
	// as zeros into a buffer: the two must be the same bytes.
	spec := Spec{ShapeOnly: true, EmbeddingLength: 128, FeedForwardLength: 256, VocabSize: 600}
	path := mustWrite(t, "m.gguf", spec)
	fromFile, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fromFile, Bytes(spec)) {
		t.Fatal("a shape-only file written with holes differs from one written with zeros")
	}
	mustParse(t, path)
}

func TestPadTo(t *testing.T) {
	tests := []struct {
		name string
		size int64
	}{
		{"2 GiB", 2 << 30},
		{"odd size", 5<<30 + 12345},
		{"a byte more than the model", int64(len(Bytes(Spec{}))) + 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := mustWrite(t, "m.gguf", Spec{PadTo: tc.size})
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Size() != tc.size {
				t.Errorf("file is %d bytes, want %d", fi.Size(), tc.size)
			}
			if disk := diskBytes(t, path); disk > 2<<20 {
				t.Errorf("a %d-byte padded file takes %d bytes of disk", tc.size, disk)
			}
			f := mustParse(t, path)
			if f.Header.TensorCount != 21 {
				t.Errorf("padded file has %d tensors, want the tiny model's 21", f.Header.TensorCount)
			}
		})
	}
}

func TestProjector(t *testing.T) {
	f := mustParse(t, mustWrite(t, "mmproj.gguf", Spec{Projector: true}))
	a := f.Architecture()
	if a.Type != "projector" || a.Architecture != "clip" || !a.ClipHasVisionEncoder || a.ClipProjectorType != "mlp" {
		t.Errorf("projector reads as type %q, architecture %q, vision %v, projector %q", a.Type, a.Architecture, a.ClipHasVisionEncoder, a.ClipProjectorType)
	}
	if kv, ok := f.Header.MetadataKV.Get("general.type"); !ok || kv.ValueString() != "mmproj" {
		t.Errorf("general.type = %v, want mmproj", kv.Value)
	}
}

func TestNoArchitectureKey(t *testing.T) {
	f := mustParse(t, mustWrite(t, "m.gguf", Spec{NoArchitecture: true}))
	if _, ok := f.Header.MetadataKV.Get("general.architecture"); ok {
		t.Error("general.architecture written though asked not to")
	}
}

func TestRefusedSpecs(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{"quantised weights without ShapeOnly", Spec{TensorType: Q4_K}, "carries no generated weights"},
		{"unknown tensor type", Spec{TensorType: 99}, "not one ggufgen writes"},
		{"kv heads not dividing heads", Spec{HeadCount: 4, HeadCountKV: 3}, "do not divide"},
		{"experts without used experts", Spec{ExpertCount: 4}, "not a mixture of experts"},
		{"rows not whole blocks", Spec{ShapeOnly: true, TensorType: Q4_K}, "whole number of 256-element blocks"},
		{"pad smaller than model", Spec{PadTo: 1000}, "less than the model's own"},
		{"odd alignment", Spec{Alignment: 12}, "multiple of 8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Write(io.Discard, tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Write = %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if _, err := WriteSplit(t.TempDir(), "x", Spec{}, 1000); err == nil {
		t.Error("1000 shards of 21 tensors were written")
	}
	if _, err := WriteSplit(t.TempDir(), "x", Spec{PadTo: 1 << 30}, 2); err == nil {
		t.Error("a padded split set was written")
	}
}

func TestWriteAfterOtherBytes(t *testing.T) {
	// A shape-only file written into an open file after a prefix: the holes
	// and the final size are relative to where it starts.
	spec := Spec{ShapeOnly: true, EmbeddingLength: 128, FeedForwardLength: 256, VocabSize: 600}
	path := filepath.Join(t.TempDir(), "prefixed")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	prefix := []byte("0123456789")
	if _, err := f.Write(prefix); err != nil {
		t.Fatal(err)
	}
	if err := Write(f, spec); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(prefix, Bytes(spec)...); !bytes.Equal(got, want) {
		t.Errorf("got %d bytes, want the prefix and the model, %d bytes", len(got), len(want))
	}
}

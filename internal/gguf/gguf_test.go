package gguf

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modelserve/internal/ggufgen"
)

func TestReadLocal(t *testing.T) {
	tests := []struct {
		name string
		spec ggufgen.Spec
		want Header // the fields compared; file, Size and Quantization are not
	}{
		{
			name: "tiny llama",
			spec: ggufgen.Spec{},
			want: Header{Architecture: "llama", ContextLength: 4096, EmbeddingLength: 64, BlockCount: 2,
				HeadCount: 4, HeadCountKV: 2, KeyLength: 16, ValueLength: 16, Shards: 1},
		},
		{
			name: "own head sizes and a chat template",
			spec: ggufgen.Spec{ContextLength: 8192, KeyLength: 32, ValueLength: 24, ChatTemplate: "{{ x }}", FileType: 1},
			want: Header{Architecture: "llama", ContextLength: 8192, EmbeddingLength: 64, BlockCount: 2,
				HeadCount: 4, HeadCountKV: 2, KeyLength: 32, ValueLength: 24, FileType: 1, ChatTemplate: true, Shards: 1},
		},
		{
			name: "embedding model",
			spec: ggufgen.Spec{Pooling: new(uint32(1))},
			want: Header{Architecture: "llama", ContextLength: 4096, EmbeddingLength: 64, BlockCount: 2,
				HeadCount: 4, HeadCountKV: 2, KeyLength: 16, ValueLength: 16, Embedding: true, Pooling: 1, Shards: 1},
		},
		{
			name: "pooling none is not an embedding model",
			spec: ggufgen.Spec{Pooling: new(uint32(0))},
			want: Header{Architecture: "llama", ContextLength: 4096, EmbeddingLength: 64, BlockCount: 2,
				HeadCount: 4, HeadCountKV: 2, KeyLength: 16, ValueLength: 16, Shards: 1},
		},
		{
			name: "mixture of experts",
			spec: ggufgen.Spec{ExpertCount: 8, ExpertUsedCount: 2, FeedForwardLength: 32},
			want: Header{Architecture: "llama", ContextLength: 4096, EmbeddingLength: 64, BlockCount: 2,
				HeadCount: 4, HeadCountKV: 2, KeyLength: 16, ValueLength: 16, ExpertCount: 8, ExpertUsedCount: 2, Shards: 1},
		},
		{
			name: "no architecture key",
			spec: ggufgen.Spec{NoArchitecture: true},
			// The shape is still read, under the library's "llama" default.
			want: Header{Architecture: "", ContextLength: 4096, EmbeddingLength: 64, BlockCount: 2,
				HeadCount: 4, HeadCountKV: 2, KeyLength: 16, ValueLength: 16, Shards: 1},
		},
		{
			name: "projector",
			spec: ggufgen.Spec{Projector: true},
			want: Header{Architecture: "clip", Projector: true, Shards: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, path := mustTiny(t, tc.spec)
			if h.Parameters == 0 {
				t.Error("no parameters counted")
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if h.Size != fi.Size() {
				t.Errorf("size %d, want the file's %d", h.Size, fi.Size())
			}
			got := h
			got.file, got.memo, got.Parameters, got.Size, got.Quantization = nil, nil, 0, 0, ""
			if got != tc.want {
				t.Errorf("read\n %+v\nwant\n %+v", got, tc.want)
			}
		})
	}
}

func TestReadQuantizationAndParameters(t *testing.T) {
	h := mustShape(t, "Llama-3.1-8B")
	if h.Quantization != "Q4_K_M" || h.FileType != 15 {
		t.Errorf("quantisation %q, file type %d; want Q4_K_M, 15", h.Quantization, h.FileType)
	}
	if h.Parameters < 8_020_000_000 || h.Parameters > 8_040_000_000 {
		t.Errorf("%d parameters, want Llama-3.1-8B's 8.03 billion", h.Parameters)
	}
	if h.ContextLength != 131072 || h.Embedding || h.Projector {
		t.Errorf("context %d, embedding %v, projector %v", h.ContextLength, h.Embedding, h.Projector)
	}
}

func TestReadSplit(t *testing.T) {
	dir := t.TempDir()
	spec := ggufgen.Spec{ChatTemplate: "{{ x }}"}
	paths, err := ggufgen.WriteSplit(dir, "m", spec, 3)
	if err != nil {
		t.Fatal(err)
	}
	whole, _ := mustTiny(t, spec)
	ctx := context.Background()

	t.Run("a shard's name reads the whole set", func(t *testing.T) {
		h, err := Read(ctx, paths[0])
		if err != nil {
			t.Fatal(err)
		}
		if h.Shards != 3 || h.Parameters != whole.Parameters || h.Architecture != "llama" || !h.ChatTemplate {
			t.Errorf("read %d shards, %d parameters, %q, template %v; want 3, %d, llama, true",
				h.Shards, h.Parameters, h.Architecture, h.ChatTemplate, whole.Parameters)
		}
	})
	t.Run("only the first shard", func(t *testing.T) {
		h, err := Read(ctx, paths[0], OnlyThisFile())
		if err != nil {
			t.Fatal(err)
		}
		if h.Shards != 1 || h.Parameters >= whole.Parameters || h.Architecture != "llama" || h.BlockCount != 2 {
			t.Errorf("read %d shards, %d of %d parameters, %q with %d blocks", h.Shards, h.Parameters, whole.Parameters, h.Architecture, h.BlockCount)
		}
	})
	t.Run("only a later shard", func(t *testing.T) {
		h, err := Read(ctx, paths[2], OnlyThisFile())
		if err != nil {
			t.Fatal(err)
		}
		// Only the first shard carries the metadata.
		if h.Architecture != "" || h.Shaped() {
			t.Errorf("a later shard reads as %q, shaped %v", h.Architecture, h.Shaped())
		}
	})
	t.Run("a missing shard fails the set", func(t *testing.T) {
		if err := os.Remove(paths[1]); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(ctx, paths[0]); err == nil {
			t.Error("a set missing a shard was read")
		}
	})
}

func TestReadRefuses(t *testing.T) {
	dir := t.TempDir()
	notGGUF := filepath.Join(dir, "notes.gguf")
	if err := os.WriteFile(notGGUF, []byte("this is not a model, just some text long enough"), 0o644); err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "cut.gguf")
	if err := os.WriteFile(truncated, ggufgen.Bytes(ggufgen.Spec{})[:5000], 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
	}{
		{"missing file", filepath.Join(dir, "nope.gguf")},
		{"not a GGUF file", notGGUF},
		{"cut short", truncated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(context.Background(), tc.path)
			if err == nil {
				t.Fatal("read without an error")
			}
			if !strings.Contains(err.Error(), "read the GGUF header of "+filepath.Base(tc.path)) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

package gguf

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modelserve/internal/ggufgen"
	"modelserve/internal/operr"
)

// crafted are headers made to harm: each once took the process down, or
// would have, inside gguf-parser-go.
var crafted = []struct {
	name string
	file []byte
	want string // the refusal's words
}{
	{"a dimension of 2^62", ggufgen.Craft(ggufgen.LlamaKVs(nil), []ggufgen.RawTensor{{Name: "token_embd.weight", Dims: []uint64{1 << 62, 4}, Type: 0}}, 1024),
		`tensor "token_embd.weight" has more elements than the file has bytes`},
	{"4294967295 layers", ggufgen.Craft(ggufgen.LlamaKVs(map[string]any{"llama.block_count": uint32(0xFFFFFFFF)}), []ggufgen.RawTensor{{Name: "token_embd.weight", Dims: []uint64{64, 4}, Type: 0}}, 1024),
		"its header says it has 4294967295 layers (llama.block_count), more than any model has"},
	{"a head count per layer, one of them absurd", ggufgen.Craft(ggufgen.LlamaKVs(map[string]any{"llama.attention.head_count_kv": []uint32{2, 1 << 30}}), nil, 0),
		"it has 1073741824 key/value heads"},
	{"a context of 2^40 tokens", ggufgen.Craft(ggufgen.LlamaKVs(map[string]any{"llama.context_length": uint64(1 << 40)}), nil, 0),
		"it was trained for 1099511627776 tokens"},
	{"a tensor of nine dimensions", ggufgen.Craft(ggufgen.LlamaKVs(nil), []ggufgen.RawTensor{{Name: "t", Dims: []uint64{1, 1, 1, 1, 1, 1, 1, 1, 1}, Type: 0}}, 64),
		"has 9 dimensions"},
	{"a tensor of no ggml type", ggufgen.Craft(ggufgen.LlamaKVs(nil), []ggufgen.RawTensor{{Name: "t", Dims: []uint64{32}, Type: 9999}}, 1024),
		"is of type 9999, which is no ggml type"},
	{"a tensor larger than the file", ggufgen.Craft(ggufgen.LlamaKVs(nil), []ggufgen.RawTensor{{Name: "t", Dims: []uint64{1 << 20, 1 << 10}, Type: 0}}, 1024),
		"more elements than the file has bytes"},
}

// TestCraftedHeadersAreRefused: a crafted header is refused with a
// sentence naming what it claims, from a file on disk and through ranges
// alike, and neither read panics or allocates what the header claims.
func TestCraftedHeadersAreRefused(t *testing.T) {
	for _, tc := range crafted {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "crafted.gguf")
			if err := os.WriteFile(path, tc.file, 0o644); err != nil {
				t.Fatal(err)
			}
			_, local := Read(context.Background(), path)
			_, ranged := ReadRanges(context.Background(), bytesOpener(tc.file))
			for how, err := range map[string]error{"from disk": local, "through ranges": ranged} {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: %v; want a refusal saying %q", how, err, tc.want)
				}
				if _, ok := operr.As(err); !ok {
					t.Errorf("%s: %v is not an operator's sentence", how, err)
				}
			}
		})
	}
}

// bytesOpener serves a file held in memory, as a registry would.
func bytesOpener(b []byte) RangeOpener {
	return func(_ context.Context, off, n int64) (io.ReadCloser, int64, error) {
		off = min(off, int64(len(b)))
		end := int64(len(b))
		if n > 0 {
			end = min(end, off+n)
		}
		return io.NopCloser(bytes.NewReader(b[off:end])), int64(len(b)), nil
	}
}

// FuzzReadRanges: whatever the bytes, reading a header returns a header or
// an error; it never panics, hangs or asks for more than the file holds.
func FuzzReadRanges(f *testing.F) {
	for _, tc := range crafted {
		f.Add(tc.file)
	}
	f.Add(ggufgen.Craft(ggufgen.LlamaKVs(nil), []ggufgen.RawTensor{{Name: "token_embd.weight", Dims: []uint64{64, 4}, Type: 0}}, 1024))
	f.Add([]byte("GGUF"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 1<<20 {
			return
		}
		open := bytesOpener(b)
		asked := func(ctx context.Context, off, n int64) (io.ReadCloser, int64, error) {
			if off > int64(len(b)) || n > int64(len(b))+1<<20 {
				t.Fatalf("asked for %d bytes from %d of a %d-byte file", n, off, len(b))
			}
			return open(ctx, off, n)
		}
		h, err := ReadRanges(context.Background(), asked, WithBufferSize(32<<10))
		if err == nil {
			// The figures a plan is made of stay finite and bounded.
			_ = h.KVBytesPerToken()
			_ = h.MemoryBytes(int64(len(b)), 4096, 4, 0)
		}
	})
}

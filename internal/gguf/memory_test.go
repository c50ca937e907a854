package gguf

import (
	"testing"

	"modelserve/internal/ggufgen"
)

// q4Weights8B is the size of a Llama-3.1-8B Q4_K_M file as the Hub lists it.
const q4Weights8B = 4_900_000_000

func TestKVBytesPerToken(t *testing.T) {
	tests := []struct {
		name string
		h    func(t *testing.T) Header
		want int64
	}{
		// 2 (K and V) × blocks × KV heads × head size × 2 bytes.
		{"Llama-3.1-8B", shape("Llama-3.1-8B"), 2 * 32 * 8 * 128 * 2},   // 128 KiB
		{"Qwen2.5-7B", shape("Qwen2.5-7B"), 2 * 28 * 4 * 128 * 2},       // 56 KiB
		{"Mistral-7B", shape("Mistral-7B"), 2 * 32 * 8 * 128 * 2},       // 128 KiB
		{"Llama-3.1-70B", shape("Llama-3.1-70B"), 2 * 80 * 8 * 128 * 2}, // 320 KiB
		{"tiny", tiny(ggufgen.Spec{}), 2 * 2 * 2 * 16 * 2},              // 256 B
		{"keys larger than values", tiny(ggufgen.Spec{KeyLength: 32, ValueLength: 24}), 2 * 2 * (32 + 24) * 2},
		{"no shape", func(*testing.T) Header { return Header{} }, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.h(t).KVBytesPerToken(); got != tc.want {
				t.Errorf("%d bytes a token, want %d", got, tc.want)
			}
		})
	}
	if got := mustShape(t, "Llama-3.1-8B").KVBytesPerToken(); got != 128*kib {
		t.Errorf("Llama-3.1-8B: %d, want 128 KiB", got)
	}
	if got := mustShape(t, "Qwen2.5-7B").KVBytesPerToken(); got != 56*kib {
		t.Errorf("Qwen2.5-7B: %d, want 56 KiB", got)
	}
}

func shape(name string) func(t *testing.T) Header {
	return func(t *testing.T) Header { return mustShape(t, name) }
}

func tiny(s ggufgen.Spec) func(t *testing.T) Header {
	return func(t *testing.T) Header { h, _ := mustTiny(t, s); return h }
}

func TestMemoryBytes(t *testing.T) {
	h := mustShape(t, "Llama-3.1-8B")
	weights := int64(h.file.TensorInfos.Bytes())

	t.Run("grows with the context", func(t *testing.T) {
		prev := int64(0)
		for _, ctx := range []int{1, 512, 1024, 4096, 16384, 65536, 131072} {
			m := h.MemoryBytes(weights, ctx, 1, 0)
			if m <= prev {
				t.Errorf("%d tokens take %d bytes, not more than fewer tokens' %d", ctx, m, prev)
			}
			prev = m
		}
	})
	t.Run("does not shrink with more slots", func(t *testing.T) {
		prev := int64(0)
		for _, slots := range []int{1, 2, 4, 8, 32} {
			m := h.MemoryBytes(weights, 16384, slots, 0)
			if m < prev {
				t.Errorf("%d slots take %d bytes, less than fewer slots' %d", slots, m, prev)
			}
			prev = m
		}
	})
	t.Run("weights and KV cache plus a little", func(t *testing.T) {
		for _, ctx := range []int{4096, 16384, 131072} {
			kv := int64(ctx) * h.KVBytesPerToken()
			m := h.MemoryBytes(weights, ctx, 1, 0)
			if m < weights+kv || m > weights+kv+2*gib {
				t.Errorf("%d tokens: %.2f GiB, want between weights+KV %.2f GiB and 2 GiB more",
					ctx, float64(m)/float64(gib), float64(weights+kv)/float64(gib))
			}
		}
	})
	t.Run("a projector is counted", func(t *testing.T) {
		without := h.MemoryBytes(weights, 4096, 1, 0)
		if with := h.MemoryBytes(weights, 4096, 1, 600<<20); with-without != 600<<20 {
			t.Errorf("a 600 MiB projector added %d bytes", with-without)
		}
	})
	t.Run("weights the header did not describe are counted", func(t *testing.T) {
		base := h.MemoryBytes(weights, 4096, 1, 0)
		if more := h.MemoryBytes(weights+gib, 4096, 1, 0); more-base != gib {
			t.Errorf("1 GiB more weights than the tensors added %d bytes", more-base)
		}
	})
	t.Run("tiny contexts do not upset the estimate", func(t *testing.T) {
		for _, ctx := range []int{-5, 0, 1, 31, 33, 100, 511} {
			if m := h.MemoryBytes(weights, ctx, 0, 0); m < weights {
				t.Errorf("%d tokens: %d bytes, less than the weights", ctx, m)
			}
		}
	})
	t.Run("no shape falls back to weights, half again and 2 GiB", func(t *testing.T) {
		if got, want := (Header{}).MemoryBytes(4*gib, 8192, 1, 0), 8*gib; got != want {
			t.Errorf("got %d, want %d", got, want)
		}
		if got, want := (Header{}).MemoryBytes(4*gib, 8192, 1, gib), 9*gib; got != want {
			t.Errorf("with a projector got %d, want %d", got, want)
		}
	})
}

// TestHostBytes: a model on cards still holds the engine, its token
// embeddings and the host's buffers in RAM: more than the engine's own,
// far less than the weights, and no more on two cards than on one.
func TestHostBytes(t *testing.T) {
	h := mustShape(t, "Llama-3.1-8B")
	weights := int64(h.file.TensorInfos.Bytes())
	var embd int64
	for _, ti := range h.file.TensorInfos {
		if ti.Name == "token_embd.weight" {
			embd = int64(ti.Bytes())
		}
	}
	one := h.HostBytes(weights, 16384, 4, 1)
	t.Logf("Llama-3.1-8B on a card: %d MiB of RAM beside %d MiB of weights (token embeddings %d MiB)", one>>20, weights>>20, embd>>20)
	if one < RAMFootprint+embd || one >= weights/2 {
		t.Errorf("on one card it holds %d bytes of RAM; want at least the engine's %d and its token embeddings' %d, under half the weights' %d",
			one, RAMFootprint, embd, weights)
	}
	if two := h.HostBytes(weights, 16384, 4, 2); two > one+one/10 {
		t.Errorf("on two cards it holds %d bytes of RAM, more than on one (%d)", two, one)
	}
	if rough := (Header{}).HostBytes(weights, 16384, 4, 1); rough < 1<<30 || rough >= weights {
		t.Errorf("without a shape it holds %d bytes of RAM; want at least 1 GiB, under the weights' %d", rough, weights)
	}
}

package gguf

import (
	"fmt"
	"strings"
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

func TestLongestContextThatFits(t *testing.T) {
	tests := []struct {
		name            string
		h               func(t *testing.T) Header
		memory, weights int64
		want            int // -1: worked out below
	}{
		// 4.6 GiB of weights and 16 GiB of cache for the whole 131072 fit 24 GiB.
		{"8B Q4 in 24 GB", shape("Llama-3.1-8B"), 24 * gib, q4Weights8B, 131072},
		// (8 GiB - 4.56 GiB) / 128 KiB is 28180 tokens of cache at most;
		// the buffers take some of it.
		{"8B Q4 in 8 GB", shape("Llama-3.1-8B"), 8 * gib, q4Weights8B, -1},
		{"8B Q4 in 5 GB", shape("Llama-3.1-8B"), 5 * gib, q4Weights8B, 0},
		// Qwen2.5-7B is trained for 32768: no more, however much room.
		{"Qwen 7B in 64 GB", shape("Qwen2.5-7B"), 64 * gib, 4_680_000_000, 32768},
		{"tiny in 1 GB", tiny(ggufgen.Spec{}), gib, 500 << 10, 4096},
		{"no shape", func(*testing.T) Header { return Header{ContextLength: 8192} }, 64 * gib, gib, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.h(t)
			got := h.LongestContextThatFits(tc.memory, tc.weights)
			if tc.want >= 0 {
				if got != tc.want {
					t.Errorf("got %d tokens, want %d", got, tc.want)
				}
				return
			}
			kvOnly := int((tc.memory - tc.weights) / h.KVBytesPerToken())
			if got%1024 != 0 || got < 16384 || got > kvOnly {
				t.Errorf("got %d tokens, want a multiple of 1024 between 16384 and %d", got, kvOnly)
			}
			if h.MemoryBytes(tc.weights, got, 1, 0) > tc.memory || h.MemoryBytes(tc.weights, got+1024, 1, 0) <= tc.memory {
				t.Errorf("%d tokens is not the most that fits", got)
			}
		})
	}
}

func TestPoolThatFits(t *testing.T) {
	const w70 = 42_500_000_000 // a Llama-3.1-70B Q4_K_M's files
	tests := []struct {
		name     string
		h        func(t *testing.T) Header
		weights  int64
		cardGB   float64
		gpus     int
		min, max int // the answer's range; equal for an exact one
	}{
		// 128 KiB of cache a token and llama.cpp's attention buffers
		// (without flash attention) leave less than 131072 on 24 GB.
		{"8B on one 24 GB card", shape("Llama-3.1-8B"), q4Weights8B, 24, 1, 65536, 131071},
		{"8B on two 24 GB cards", shape("Llama-3.1-8B"), q4Weights8B, 24, 2, 131072, 1 << 20},
		{"70B on one 24 GB card", shape("Llama-3.1-70B"), w70, 24, 1, -1, -1},
		{"70B on four 24 GB cards", shape("Llama-3.1-70B"), w70, 24, 4, 32768, 131072},
		{"card size unknown", shape("Llama-3.1-8B"), q4Weights8B, 0, 1, 0, 0},
		{"no shape", func(*testing.T) Header { return Header{} }, q4Weights8B, 24, 1, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.h(t)
			got := h.PoolThatFits(tc.weights, tc.cardGB, tc.gpus)
			if got < tc.min || got > tc.max {
				t.Fatalf("%d tokens, want %d to %d", got, tc.min, tc.max)
			}
			if got <= 0 {
				return
			}
			card := int64(tc.cardGB * float64(gib))
			extra := h.unread(tc.weights) / int64(tc.gpus)
			at, _ := h.estimate(got, 1, tc.gpus)
			above, _ := h.estimate(got+256, 1, tc.gpus)
			if got%256 != 0 || at+extra > card || above+extra <= card {
				t.Errorf("%d tokens is not the most that fits in steps of 256: %d bytes, 256 more %d, card %d", got, at+extra, above+extra, card)
			}
		})
	}
}

func TestFitPoolToCard(t *testing.T) {
	h8 := mustShape(t, "Llama-3.1-8B")
	on24 := h8.PoolThatFits(q4Weights8B, 24, 1)
	on8 := h8.PoolThatFits(q4Weights8B, 8, 1)
	// A card with room for the weights and a few hundred tokens.
	at600, _ := h8.estimate(600, 1, 1)
	smallGB := float64(at600+h8.unread(q4Weights8B)) / float64(gib)
	onSmall := h8.PoolThatFits(q4Weights8B, smallGB, 1)
	if onSmall != 512 {
		t.Fatalf("the small card holds %d tokens, want 512", onSmall)
	}

	tests := []struct {
		name    string
		h       Header
		pool    Pool
		weights int64
		class   string
		cardGB  float64
		gpus    int
		want    Pool
		why     string
		err     string
	}{
		{
			name: "fits as asked", h: h8, pool: Pool{CtxPool: 16384, ContextLength: 4096},
			weights: q4Weights8B, class: "L4", cardGB: 24, gpus: 1,
			want: Pool{CtxPool: 16384, ContextLength: 4096},
		},
		{
			name: "8B at 131072 on an L4 is cut", h: h8, pool: Pool{CtxPool: 131072, ContextLength: 131072},
			weights: q4Weights8B, class: "L4", cardGB: 24, gpus: 1,
			want: Pool{CtxPool: on24 / 1024 * 1024, ContextLength: on24 / 1024 * 1024},
			why:  fmt.Sprintf("a 131072-token pool does not fit L4 beside 4.6 GB of weights: 1 slot of %d tokens instead", on24/1024*1024),
		},
		{
			name: "eight slots stay eight while each keeps 2048", h: h8, pool: Pool{CtxPool: 131072, ContextLength: 16384},
			weights: q4Weights8B, class: "L4", cardGB: 24, gpus: 1,
			want: Pool{CtxPool: on24 / 8 / 1024 * 1024 * 8, ContextLength: on24 / 8 / 1024 * 1024},
			why:  fmt.Sprintf("a 131072-token pool does not fit L4 beside 4.6 GB of weights: 8 slots of %d tokens instead", on24/8/1024*1024),
		},
		{
			name: "slots give way to 2048 tokens each", h: h8, pool: Pool{CtxPool: 131072, ContextLength: 1024},
			weights: q4Weights8B, class: "T4-8", cardGB: 8, gpus: 1,
			want: Pool{CtxPool: on8 / 2048 * 2048, ContextLength: 2048},
			why:  fmt.Sprintf("a 131072-token pool does not fit T4-8 beside 4.6 GB of weights: %d slots of 2048 tokens instead", on8/2048),
		},
		{
			name: "70B's weights do not fit one L4", h: mustShape(t, "Llama-3.1-70B"), pool: Pool{CtxPool: 65536, ContextLength: 16384},
			weights: 42_500_000_000, class: "L4", cardGB: 24, gpus: 1,
			want: Pool{CtxPool: 65536, ContextLength: 16384},
			err:  "its weights (39.6 GB) do not fit 1 card(s) of L4 with room to run: choose a smaller quantisation, or more cards",
		},
		{
			name: "room for less than 1024 tokens", h: h8, pool: Pool{CtxPool: 4096, ContextLength: 4096},
			weights: q4Weights8B, class: "tiny card", cardGB: smallGB, gpus: 1,
			want: Pool{CtxPool: 4096, ContextLength: 4096},
			err:  fmt.Sprintf("its weights (4.6 GB) leave room on tiny card for a context of %d tokens only", onSmall),
		},
		{
			name: "card size unknown", h: h8, pool: Pool{CtxPool: 131072, ContextLength: 131072},
			weights: q4Weights8B, class: "mystery", cardGB: 0, gpus: 1,
			want: Pool{CtxPool: 131072, ContextLength: 131072},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, why, err := FitPoolToCard(tc.h, tc.pool, tc.weights, tc.class, tc.cardGB, tc.gpus)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Errorf("error %v\nwant %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || why != tc.why {
				t.Errorf("got %+v, %q\nwant %+v, %q", got, why, tc.want, tc.why)
			}
			if got.ContextLength%1024 != 0 || got.CtxPool > max(on24, tc.pool.CtxPool) {
				t.Errorf("pool %+v is not whole slots of a multiple of 1024", got)
			}
			if why != "" && !strings.Contains(why, "instead") {
				t.Errorf("why %q does not say what was done", why)
			}
		})
	}
}

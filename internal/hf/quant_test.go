package hf

import "testing"

func TestQuant(t *testing.T) {
	tests := []struct {
		name string
		file string
		want string
	}{
		{"bartowski K-quant", "Qwen2.5-7B-Instruct-Q4_K_M.gguf", "Q4_K_M"},
		{"shard of a K-quant", "Qwen2.5-7B-Instruct-Q5_K_S-00001-of-00002.gguf", "Q5_K_S"},
		{"TheBloke dotted lower case", "mistral-7b-instruct-v0.2.Q8_0.gguf", "Q8_0"},
		{"legacy Q4_0", "gemma-3-4b-it-qat-q4_0.gguf", "Q4_0"},
		{"legacy Q4_1", "Llama-3.2-1B-Instruct-Q4_1.gguf", "Q4_1"},
		{"Q6_K", "Phi-3.5-mini-instruct-Q6_K.gguf", "Q6_K"},
		{"Q3_K_L", "Meta-Llama-3.1-8B-Instruct-Q3_K_L.gguf", "Q3_K_L"},
		{"Q2_K", "Qwen3-8B-Q2_K.gguf", "Q2_K"},
		{"bartowski _L mix", "Meta-Llama-3.1-8B-Instruct-Q6_K_L.gguf", "Q6_K_L"},
		{"IQ4_XS", "Llama-3.2-3B-Instruct-IQ4_XS.gguf", "IQ4_XS"},
		{"IQ4_NL", "Qwen2.5-Coder-7B-Instruct-IQ4_NL.gguf", "IQ4_NL"},
		{"IQ2_XXS not IQ2_XS", "Meta-Llama-3.1-70B-Instruct-IQ2_XXS.gguf", "IQ2_XXS"},
		{"IQ3_M", "gemma-2-27b-it-IQ3_M.gguf", "IQ3_M"},
		{"IQ1_S lower case", "deepseek-r1-iq1_s.gguf", "IQ1_S"},
		{"unsloth dynamic keeps UD-", "Qwen3-30B-A3B-UD-Q4_K_XL.gguf", "UD-Q4_K_XL"},
		{"unsloth dynamic IQ", "DeepSeek-R1-0528-UD-IQ1_S-00001-of-00004.gguf", "UD-IQ1_S"},
		{"F16 lower case", "nomic-embed-text-v1.5.f16.gguf", "F16"},
		{"BF16", "Qwen3-0.6B-BF16.gguf", "BF16"},
		{"F32", "all-MiniLM-L6-v2-f32.gguf", "F32"},
		{"FP16 spelled out", "ggml-model-fp16.gguf", "F16"},
		{"MXFP4", "gpt-oss-20b-mxfp4.gguf", "MXFP4"},
		{"MXFP4_MOE", "gpt-oss-120b-MXFP4_MOE-00001-of-00002.gguf", "MXFP4_MOE"},
		{"TQ1_0", "bitnet_b1_58-large-TQ1_0.gguf", "TQ1_0"},
		{"ARM repack", "Llama-3.2-3B-Instruct-Q4_0_4_4.gguf", "Q4_0_4_4"},
		{"projector's precision", "mmproj-model-f16.gguf", "F16"},
		{"file's quant wins over folder's", "Q8_0/Qwen2.5-72B-Instruct-Q8_0-00001-of-00002.gguf", "Q8_0"},
		{"folder alone names it", "Q4_K_M/Meta-Llama-3.1-405B-Instruct-00001-of-00008.gguf", "Q4_K_M"},
		{"model version is no quant", "Qwen2.5-7B-Instruct.gguf", ""},
		{"Qwen2 is not Q2_K", "Qwen2_K-notes.gguf", ""},
		{"quant glued to a word is no quant", "modelQ4_K_M.gguf", ""},
		{"safetensors", "model-00001-of-00004.safetensors", ""},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Quant(tt.file); got != tt.want {
				t.Errorf("Quant(%q) = %q, want %q", tt.file, got, tt.want)
			}
		})
	}
}

// TestQuantRankOrder checks the order a planner relies on when it takes the
// best file that fits: each name must rank strictly above the next.
func TestQuantRankOrder(t *testing.T) {
	order := []string{
		"F32", "BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_0",
		"Q4_K_M", "Q4_K_S", "IQ4_XS", "Q4_0", "Q3_K_L", "Q3_K_M", "Q3_K_S",
		"Q2_K", "IQ2_XXS", "IQ1_S",
	}
	for i := 1; i < len(order); i++ {
		hi, lo := order[i-1], order[i]
		if QuantRank(hi) <= QuantRank(lo) {
			t.Errorf("QuantRank(%s) = %d, not above QuantRank(%s) = %d", hi, QuantRank(hi), lo, QuantRank(lo))
		}
	}
}

func TestQuantRank(t *testing.T) {
	tests := []struct {
		name string
		a, b string
		cmp  int // sign of rank(a) - rank(b)
	}{
		{"BF16 as good as F16", "BF16", "F16", 0},
		{"case does not matter", "q4_k_m", "Q4_K_M", 0},
		{"Q4_K is Q4_K_M", "Q4_K", "Q4_K_M", 0},
		{"ARM repack is Q4_0", "Q4_0_4_4", "Q4_0", 0},
		{"unsloth dynamic above plain", "UD-Q4_K_XL", "Q4_K_M", 1},
		{"bartowski _L above plain", "Q6_K_L", "Q6_K", 1},
		{"8-bit above any 6-bit", "Q8_0", "Q6_K_L", 1},
	}
	sign := func(n int) int { return min(max(n, -1), 1) }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sign(QuantRank(tt.a) - QuantRank(tt.b)); got != tt.cmp {
				t.Errorf("QuantRank(%s) = %d, QuantRank(%s) = %d: want sign %d", tt.a, QuantRank(tt.a), tt.b, QuantRank(tt.b), tt.cmp)
			}
		})
	}
	for _, q := range []string{"", "Q9_9", "GPTQ", "AWQ"} {
		if r := QuantRank(q); r != 0 {
			t.Errorf("QuantRank(%q) = %d, want 0 for a name that is no quantisation", q, r)
		}
	}
}

// TestQuantEveryNameKnown checks that every quantisation Quant can return
// from llama.cpp's list has a rank and a size: a planner that meets a
// zero would not know what the file is.
func TestQuantEveryNameKnown(t *testing.T) {
	for _, tier := range quantTiers {
		for _, q := range tier {
			if QuantBits(q) == 0 {
				t.Errorf("QuantBits(%s) = 0; every ranked quantisation needs a size", q)
			}
			if got := Quant("model-" + q + ".gguf"); got != q {
				t.Errorf("Quant(model-%s.gguf) = %q, want it read back as %s", q, got, q)
			}
		}
	}
	if len(quantBitsTable) != len(quantRanks) {
		t.Errorf("%d quantisations have sizes but %d have ranks; they should be the same names", len(quantBitsTable), len(quantRanks))
	}
}

func TestQuantBits(t *testing.T) {
	tests := []struct {
		q        string
		lo, high float64
	}{
		{"Q4_K_M", 4.8, 4.9},
		{"Q8_0", 8.4, 8.6},
		{"F16", 16, 16},
		{"BF16", 16, 16},
		{"F32", 32, 32},
		{"IQ2_XXS", 2.0, 2.1},
		{"UD-Q4_K_XL", 4.85, 5.1},
		{"mxfp4", 4.2, 4.3},
		{"", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.q, func(t *testing.T) {
			if got := QuantBits(tt.q); got < tt.lo || got > tt.high {
				t.Errorf("QuantBits(%q) = %v, want %v..%v", tt.q, got, tt.lo, tt.high)
			}
		})
	}
}

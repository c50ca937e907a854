package hf

import (
	"regexp"
	"strings"
)

// quantPattern finds a quantisation in an upper-cased file name. It must
// stand on its own between separators ("-", ".", "_", "/"), so that a model
// name such as "Qwen2.5" or "Phi-3.5" is never read as one. Longer spellings
// come first in each alternation: RE2 prefers the earlier alternative, and
// the separator after the match then rules out a shorter reading.
//
// Besides llama.cpp's own type names it knows the names quantisers add:
// bartowski's "_L" and "_XL" mixes (Q4_K_L: embeddings and output at Q8_0),
// Unsloth's dynamic quants ("UD-Q4_K_XL"), the ARM repacks (Q4_0_4_4) and
// "FP16"/"FP32", which some write for F16/F32.
var quantPattern = regexp.MustCompile(`(?:^|[^A-Z0-9])(` +
	`(?:UD[-_])?` +
	`(?:IQ[1-4]_(?:XXS|XS|NL|S|M)` +
	`|Q[2-8]_K(?:_(?:XXL|XL|XS|L|M|S))?` +
	`|Q4_0_[48]_[48]` +
	`|Q[4-8]_[01]` +
	`|TQ[12]_0` +
	`|MXFP4(?:_MOE)?` +
	`|BF16|FP16|FP32|F16|F32)` +
	`)(?:$|[^A-Z0-9])`)

// Quant reads the quantisation from a file or set name, in canonical upper
// case ("Q4_K_M", "IQ2_XXS", "BF16", "UD-Q4_K_XL"), or "" when the name
// names none. Case does not matter in the name. When a path names several
// (a Q8_0 folder holding a Q8_0 file), the last one wins: the file's own
// name is more specific than its folder's.
func Quant(name string) string {
	s := strings.ToUpper(name)
	found := ""
	for start := 0; start < len(s); {
		m := quantPattern.FindStringSubmatchIndex(s[start:])
		if m == nil {
			break
		}
		found = s[start+m[2] : start+m[3]]
		// Go on from the end of the quantisation, not of the match: the
		// separator after it may be the one before the next.
		start += m[3]
	}
	if found == "" {
		return ""
	}
	if strings.HasPrefix(found, "UD_") {
		found = "UD-" + found[3:]
	}
	switch found {
	case "FP16":
		return "F16"
	case "FP32":
		return "F32"
	}
	return found
}

// quantBase is what a quantisation name is ranked and sized as: Unsloth's
// dynamic quants like the mix they build on, the ARM repacks of Q4_0 like
// Q4_0, and llama-quantize's aliases (Q4_K means Q4_K_M) like what they
// stand for.
func quantBase(q string) string {
	q = strings.TrimPrefix(strings.ToUpper(q), "UD-")
	switch {
	case strings.HasPrefix(q, "Q4_0_"):
		return "Q4_0"
	case q == "Q3_K" || q == "Q4_K" || q == "Q5_K":
		return q + "_M"
	case q == "MXFP4_MOE":
		return "MXFP4"
	}
	return q
}

// quantTiers orders quantisations from best to worst quality; names in one
// tier are as good as each other. The order follows the perplexity added
// over the 16-bit model that llama.cpp's llama-quantize lists for Llama-3-8B
// (Q5_K_M +0.057, Q5_K_S +0.105, Q5_1 +0.106, Q5_0 +0.132, Q4_K_M +0.175,
// Q4_K_S +0.269, Q4_1 +0.451, Q4_0 +0.469, Q3_K_L +0.556, Q3_K_M +0.657,
// Q3_K_S +1.632); the IQ types, which it lists by size only, sit by their
// bits per weight, above the K-quant of equal size as their importance
// matrix earns them. Mixes that keep a few tensors wider ("_L", "_XL") sit
// just above the mix they extend.
var quantTiers = [][]string{
	{"F32"},
	{"BF16", "F16"},
	{"Q8_K_XL"},
	{"Q8_0"},
	{"Q6_K_XL", "Q6_K_L"},
	{"Q6_K"},
	{"Q5_K_XL", "Q5_K_L"},
	{"Q5_K_M"},
	{"Q5_K_S"},
	{"Q5_1"},
	{"Q5_0"},
	{"Q4_K_XL", "Q4_K_L"},
	{"Q4_K_M"},
	{"Q4_K_S"},
	{"IQ4_NL"},
	{"IQ4_XS"},
	{"MXFP4"},
	{"Q4_1"},
	{"Q4_0"},
	{"Q3_K_XL"},
	{"Q3_K_L"},
	{"Q3_K_M"},
	{"IQ3_M"},
	{"IQ3_S"},
	{"Q3_K_S"},
	{"IQ3_XS"},
	{"Q3_K_XS"},
	{"IQ3_XXS"},
	{"Q2_K_XL"},
	{"Q2_K_L"},
	{"Q2_K"},
	{"IQ2_M"},
	{"Q2_K_S"},
	{"IQ2_S"},
	{"IQ2_XS"},
	{"IQ2_XXS"},
	{"TQ2_0"},
	{"IQ1_M"},
	{"TQ1_0"},
	{"IQ1_S"},
}

var quantRanks = func() map[string]int {
	ranks := map[string]int{}
	for i, tier := range quantTiers {
		for _, q := range tier {
			ranks[q] = len(quantTiers) - i
		}
	}
	return ranks
}()

// QuantRank orders quantisations by quality for a planner choosing the
// best file that fits: higher is better, equal ranks are as good as each
// other (BF16 and F16), and 0 means the name is not a known quantisation.
// F32 > BF16 = F16 > Q8_0 > Q6_K > Q5_K_M > Q5_K_S > Q5_0 > Q4_K_M > Q4_K_S
// > IQ4_XS > ... > IQ1_S. Accepts what Quant returns, in any case.
func QuantRank(q string) int {
	return quantRanks[quantBase(q)]
}

// quantBitsTable holds approximate bits per weight of a whole model file.
// The K-quant mixes and the legacy types are the sizes llama.cpp's
// llama-quantize lists for LLaMA-v1-7B (6.74e9 weights; "Q4_K_M: 3.80G" is
// 3.80 GiB, 4.84 bits), so they include the wider tensors a mix keeps; the
// IQ, TQ and MXFP4 figures are the bits per weight that listing gives for
// them; F16, BF16 and F32 are exact. The "_L"/"_XL" mixes of quantisers
// have no listing: they are taken as the mix they extend plus about a
// tenth of a bit for the wider embedding and output tensors.
var quantBitsTable = map[string]float64{
	"F32":     32,
	"BF16":    16,
	"F16":     16,
	"Q8_K_XL": 9.0,
	"Q8_0":    8.5,
	"Q6_K_XL": 6.65,
	"Q6_K_L":  6.65,
	"Q6_K":    6.56,
	"Q5_K_XL": 5.8,
	"Q5_K_L":  5.8,
	"Q5_K_M":  5.67,
	"Q5_K_S":  5.52,
	"Q5_1":    6.0,
	"Q5_0":    5.52,
	"Q4_K_XL": 4.95,
	"Q4_K_L":  4.95,
	"Q4_K_M":  4.85,
	"Q4_K_S":  4.58,
	"IQ4_NL":  4.5,
	"IQ4_XS":  4.25,
	"MXFP4":   4.25,
	"Q4_1":    4.97,
	"Q4_0":    4.54,
	"Q3_K_XL": 4.37,
	"Q3_K_L":  4.27,
	"Q3_K_M":  3.91,
	"IQ3_M":   3.66,
	"IQ3_S":   3.44,
	"Q3_K_S":  3.5,
	"IQ3_XS":  3.3,
	"Q3_K_XS": 3.3,
	"IQ3_XXS": 3.06,
	"Q2_K_XL": 3.45,
	"Q2_K_L":  3.45,
	"Q2_K":    3.35,
	"IQ2_M":   2.7,
	"Q2_K_S":  2.75,
	"IQ2_S":   2.5,
	"IQ2_XS":  2.31,
	"IQ2_XXS": 2.06,
	"TQ2_0":   2.06,
	"IQ1_M":   1.75,
	"TQ1_0":   1.69,
	"IQ1_S":   1.56,
}

// QuantBits is the approximate number of bits a quantisation spends per
// weight (Q4_K_M about 4.85, Q8_0 8.5, F16 16), for estimates made before a
// file's real size is known; 0 when the name is not a known quantisation.
// The registry's file sizes are the truth whenever they are at hand.
func QuantBits(q string) float64 {
	return quantBitsTable[quantBase(q)]
}

package gateway

import "testing"

// TestTallyCounts reads the counts of answers as llama.cpp writes them,
// plain and streamed, and of answers whose text looks like the counts: the
// text is never taken for them.
func TestTallyCounts(t *testing.T) {
	const final = `{"choices":[],"usage":{"completion_tokens":8,"prompt_tokens":12,"total_tokens":20},` +
		`"timings":{"cache_n":4,"prompt_n":8,"predicted_n":8,"predicted_ms":2.5}}`
	cases := []struct {
		name   string
		stream bool
		body   string
		want   counts
	}{
		{"plain", false, `{"choices":[{"message":{"content":"Hello."}}],"usage":{"completion_tokens":3,"prompt_tokens":9},` +
			`"timings":{"cache_n":2,"prompt_n":7,"predicted_n":3,"predicted_ms":1.5}}`,
			counts{prompt: 9, cached: 2, completion: 3, generating: 1500000}},
		{"text like the counts", false, `{"choices":[{"message":{"content":"\"usage\":{\"prompt_tokens\":99} \"timings\": {\"cache_n\":99}"}}],` +
			`"usage":{"completion_tokens":3,"prompt_tokens":9},"timings":{"cache_n":2,"prompt_n":7,"predicted_n":3,"predicted_ms":0}}`,
			counts{prompt: 9, cached: 2, completion: 3}},
		{"braces in a string of the counts", false, `{"usage":{"note":"}{\"","completion_tokens":5,"prompt_tokens":6}}`,
			counts{prompt: 6, completion: 5}},
		{"nested and spaced", false, `{"usage": {"prompt_tokens_details": {"cached_tokens": 3}, "prompt_tokens" : 6, "completion_tokens":5},` +
			`"timings": {"prompt_n": 2, "cache_n": 4, "predicted_n": 5, "predicted_ms": 1.25e1}}`,
			counts{prompt: 6, cached: 4, completion: 5, generating: 12500000}},
		{"vLLM's, with its prefix cache's", false, `{"choices":[{"message":{"content":"Hello."}}],"usage":{"prompt_tokens":52,` +
			`"total_tokens":55,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":32}}}`,
			counts{prompt: 52, cached: 32, completion: 3}},
		{"vLLM's, nothing cached", false, `{"usage":{"prompt_tokens":43,"total_tokens":46,"completion_tokens":3,"prompt_tokens_details":null}}`,
			counts{prompt: 43, completion: 3}},
		{"vLLM's stream", true, "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n" +
			"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":52,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":16}}}\n\ndata: [DONE]\n\n",
			counts{prompt: 52, cached: 16, completion: 3}},
		{"no counts", false, `{"choices":[{"message":{"content":"usage"}}]}`, counts{}},
		{"cut off", false, `{"usage":{"completion_tokens":5,"prompt_tok`, counts{}},
		{"stream", true, "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: " + final + "\n\ndata: [DONE]\n\n",
			counts{prompt: 12, cached: 4, completion: 8, generating: 2500000}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tl := tally{stream: c.stream}
			// In pieces, as an answer arrives.
			for b := []byte(c.body); len(b) > 0; b = b[min(len(b), 7):] {
				tl.feed(b[:min(len(b), 7)])
			}
			if got := tl.counts(); got != c.want {
				t.Errorf("counts %+v; want %+v", got, c.want)
			}
		})
	}
}

package hf

import (
	"regexp"
	"strings"
	"testing"
)

func TestModelName(t *testing.T) {
	tests := []struct {
		id   string
		want string
	}{
		{"bartowski/Qwen2.5-7B-Instruct-GGUF", "qwen2.5-7b-instruct"},
		{"unsloth/Llama-3.2-1B-Instruct-GGUF", "llama-3.2-1b-instruct"},
		{"TheBloke/Mistral-7B-Instruct-v0.2-GGUF", "mistral-7b-instruct-v0.2"},
		{"Qwen/Qwen3-8B-GGUF", "qwen3-8b"},
		{"ggml-org/gemma-3-4b-it-GGUF", "gemma-3-4b-it"},
		{"nomic-ai/nomic-embed-text-v1.5-GGUF", "nomic-embed-text-v1.5"},
		{"mradermacher/Llama-3.2-3B-Instruct-i1-GGUF", "llama-3.2-3b-instruct-i1"},
		{"second-state/All-MiniLM-L6-v2-Embedding-GGUF", "all-minilm-l6-v2-embedding"},
		{"lmstudio-community/Qwen2.5-Coder-7B-Instruct-gguf", "qwen2.5-coder-7b-instruct"},
		{"someone/TinyLlama_1.1B_Chat_GGUF", "tinyllama_1.1b_chat"},
		{"Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b-instruct"},
		{"openai/gpt-oss-20b", "gpt-oss-20b"},
		{"local/my-finetune", "my-finetune"},
		{"local/Team Model (v2)", "team-model-v2"},
		{"someone/GGUF", "gguf"},
		{"someone/a__-..b", "a-b"},
		{"someone/----", "model"},
		{"Phi-3.5-mini-instruct-GGUF", "phi-3.5-mini-instruct"},
		{"someone/" + strings.Repeat("abcdefghi-", 10), "abcdefghi-abcdefghi-abcdefghi-abcdefghi-abcdefghi-abcdefghi-abcd"},
		{"someone/" + strings.Repeat("a", 63) + "-b", strings.Repeat("a", 63)},
	}
	valid := regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			got := ModelName(tt.id)
			if got != tt.want {
				t.Errorf("ModelName(%q) = %q, want %q", tt.id, got, tt.want)
			}
			if !valid.MatchString(got) || len(got) > 64 {
				t.Errorf("ModelName(%q) = %q, which is not a valid catalog name", tt.id, got)
			}
		})
	}
}

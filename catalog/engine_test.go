package catalog_test

import (
	"slices"
	"strings"
	"testing"

	"modelserve/catalog"
)

func TestLlamaArgs(t *testing.T) {
	tests := []struct {
		name string
		in   catalog.Sizing
		want string
	}{
		{"defaults divide into four slots",
			catalog.Sizing{CtxPool: 16384, ContextLength: 4096},
			"--ctx-size 16384 --parallel 4"},
		{"a long context gets slots of its length, not the engine's four",
			catalog.Sizing{CtxPool: 32768, ContextLength: 32768},
			"--ctx-size 32768 --parallel 1"},
		{"a pool smaller than the context still has one slot",
			catalog.Sizing{CtxPool: 2048, ContextLength: 4096},
			"--ctx-size 2048 --parallel 1"},
		{"slots round down",
			catalog.Sizing{CtxPool: 10000, ContextLength: 4096},
			"--ctx-size 10000 --parallel 2"},
		{"an unsized profile leaves the context to the engine",
			catalog.Sizing{},
			""},
		{"embeddings batch a whole slot at once",
			catalog.Sizing{CtxPool: 32768, ContextLength: 1024, Embeddings: true},
			"--embedding --ctx-size 32768 --parallel 32 --batch-size 1024 --ubatch-size 1024"},
		{"a judge keeps no prompt cache",
			catalog.Sizing{CtxPool: 8192, ContextLength: 8192, Judge: true},
			"--ctx-size 8192 --parallel 1 --cache-ram 0"},
		{"an embedding judge has both",
			catalog.Sizing{CtxPool: 4096, ContextLength: 2048, Embeddings: true, Judge: true},
			"--embedding --ctx-size 4096 --parallel 2 --batch-size 2048 --ubatch-size 2048 --cache-ram 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := catalog.LlamaArgs(tt.in)
			if want := strings.Fields(tt.want); !slices.Equal(got, want) {
				t.Errorf("LlamaArgs(%+v) = %q, want %q", tt.in, got, want)
			}
		})
	}
}

func TestMaxOutput(t *testing.T) {
	tests := []struct {
		name    string
		context int
		want    int
	}{
		{"a short context still allows 1024", 2048, 1024},
		{"no context allows 1024", 0, 1024},
		{"exactly the floor", 4096, 1024},
		{"a quarter in between", 16384, 4096},
		{"a quarter, rounded down", 10001, 2500},
		{"exactly the ceiling", 32768, 8192},
		{"a long context stops at 8192", 131072, 8192},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := catalog.MaxOutput(tt.context); got != tt.want {
				t.Errorf("MaxOutput(%d) = %d, want %d", tt.context, got, tt.want)
			}
		})
	}
}

func TestSuggestCores(t *testing.T) {
	tests := []struct {
		name  string
		nodes []int
		want  int
	}{
		{"no nodes leaves the engine's default", nil, 0},
		{"half of one node", []int{16}, 8},
		{"half of the smallest node", []int{64, 8, 32}, 4},
		{"an odd count rounds down", []int{7}, 3},
		{"a one-core node still gets one", []int{1, 32}, 1},
		{"a node that reported no cores still gets one", []int{0}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := catalog.SuggestCores(tt.nodes); got != tt.want {
				t.Errorf("SuggestCores(%v) = %d, want %d", tt.nodes, got, tt.want)
			}
		})
	}
}

package catalog_test

import (
	"testing"

	"modelserve/catalog"
)

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

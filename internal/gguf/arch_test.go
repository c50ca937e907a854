package gguf

import "testing"

func TestSupported(t *testing.T) {
	tests := []struct {
		name, arch, build string
		want              string // empty: supported
	}{
		{"llama", "llama", "b6500", ""},
		{"qwen2", "qwen2", "b6500", ""},
		{"gpt-oss", "gpt-oss", "b6500", ""},
		{"bert embeddings", "bert", "b6500", ""},
		{"unknown", "foo", "b6500", "llama.cpp b6500 on the nodes cannot run this: its architecture foo is not one it knows"},
		{"unknown, build not known", "foo", "", "llama.cpp on the nodes cannot run this: its architecture foo is not one it knows"},
		{"case matters", "LLAMA", "b6500", "llama.cpp b6500 on the nodes cannot run this: its architecture LLAMA is not one it knows"},
		{"projector", "clip", "b6500", "llama.cpp b6500 on the nodes cannot run this: it is a vision projector (architecture clip), loaded beside a model's weights, not a model"},
		{"no architecture", "", "b6500", "llama.cpp b6500 on the nodes cannot run this: its header names no architecture (general.architecture is missing)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Supported(tc.arch, tc.build)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Errorf("got %v\nwant %s", err, tc.want)
			}
		})
	}
}

func TestKnownAdd(t *testing.T) {
	k := KnownArchitectures()
	if err := k.Supported("qwen9", "b9999"); err == nil {
		t.Fatal("qwen9 supported before it was added")
	}
	k.Add(" qwen9 ", "", "clip")
	if err := k.Supported("qwen9", "b9999"); err != nil {
		t.Errorf("added qwen9 refused: %v", err)
	}
	if err := k.Supported("clip", "b9999"); err == nil {
		t.Error("clip became a model by being added")
	}
	// Each call is a fresh copy: one caller's additions are not another's.
	if err := Supported("qwen9", "b9999"); err == nil {
		t.Error("an addition to one set leaked into the shipped list")
	}
	names := KnownArchitectures().Names()
	if len(names) < 100 || names[0] > names[len(names)-1] {
		t.Errorf("%d names, first %q last %q: want the shipped list of over 100, sorted", len(names), names[0], names[len(names)-1])
	}
}

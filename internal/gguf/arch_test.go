package gguf

import (
	"strings"
	"testing"
)

func TestSupported(t *testing.T) {
	tests := []struct {
		name, arch string
		build      int
		want       string // empty: supported
	}{
		{"qwen3 on a build before it", "qwen3", 4500, "qwen3 needs llama.cpp b5092 or newer; the nodes run b4500: update llama-server on the nodes, or pick a model of another architecture"},
		{"qwen3 on the build that added it", "qwen3", 5092, ""},
		{"qwen3 on a later build", "qwen3", 6500, ""},
		{"qwen3 on a build not known", "qwen3", 0, ""},
		{"llama on the first build", "llama", 1, ""},
		{"llama4 one build early", "llama4", 5073, "llama4 needs llama.cpp b5074 or newer; the nodes run b5073: update llama-server on the nodes, or pick a model of another architecture"},
		{"gpt-oss", "gpt-oss", 6500, ""},
		{"bert embeddings", "bert", 6500, ""},
		{"unknown", "foo", 6500, "llama.cpp b6500 on the nodes cannot run this: its architecture foo is not one it knows"},
		{"unknown, build not known", "foo", 0, "llama.cpp on the nodes cannot run this: its architecture foo is not one it knows"},
		{"case matters", "LLAMA", 6500, "llama.cpp b6500 on the nodes cannot run this: its architecture LLAMA is not one it knows"},
		{"projector", "clip", 6500, "llama.cpp b6500 on the nodes cannot run this: it is a vision projector (architecture clip), loaded beside a model's weights, not a model"},
		{"projector, build not known", "clip", 0, "llama.cpp on the nodes cannot run this: it is a vision projector (architecture clip), loaded beside a model's weights, not a model"},
		{"no architecture", "", 6500, "llama.cpp b6500 on the nodes cannot run this: its header names no architecture (general.architecture is missing)"},
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
	if err := k.Supported("qwen9", 9999); err == nil {
		t.Fatal("qwen9 supported before it was added")
	}
	k.Add(" qwen9 ", "", "clip")
	for _, build := range []int{0, 1, 9999} {
		if err := k.Supported("qwen9", build); err != nil {
			t.Errorf("added qwen9 refused at b%d: %v", build, err)
		}
	}
	if err := k.Supported("clip", 9999); err == nil {
		t.Error("clip became a model by being added")
	}
	// The operator's word is final: an added name loses its minimum.
	k.Add("qwen3")
	if err := k.Supported("qwen3", 4500); err != nil {
		t.Errorf("qwen3 added by the operator refused: %v", err)
	}
	// Each call is a fresh copy: one caller's additions are not another's.
	if err := Supported("qwen9", 9999); err == nil {
		t.Error("an addition to one set leaked into the shipped list")
	}
	if err := Supported("qwen3", 4500); err == nil {
		t.Error("an addition to one set lifted the shipped list's minimum")
	}
	names := KnownArchitectures().Names()
	if len(names) < 100 || names[0] > names[len(names)-1] {
		t.Errorf("%d names, first %q last %q: want the shipped list of over 100, sorted", len(names), names[0], names[len(names)-1])
	}
}

func TestMinBuild(t *testing.T) {
	k := KnownArchitectures()
	tests := []struct {
		arch  string
		min   int
		known bool
	}{
		{"qwen3", 5092, true},
		{"llama", 0, true},
		{"foo", 0, false},
	}
	for _, tc := range tests {
		if min, known := k.MinBuild(tc.arch); min != tc.min || known != tc.known {
			t.Errorf("MinBuild(%q) = %d, %v; want %d, %v", tc.arch, min, known, tc.min, tc.known)
		}
	}
}

// TestShippedList reads the embedded list as KnownArchitectures does, so a
// malformed line fails here rather than panicking at run time.
func TestShippedList(t *testing.T) {
	k, err := parseArchitectures(architectures)
	if err != nil {
		t.Fatal(err)
	}
	withMin := 0
	for name, min := range k {
		if strings.ContainsAny(name, " \t#") {
			t.Errorf("name %q: want one word", name)
		}
		if min < 0 || min >= maxBuild {
			t.Errorf("%s: minimum build %d: want 0 (none) or a release number below %d", name, min, maxBuild)
		}
		if min > 0 {
			withMin++
		}
	}
	if withMin == 0 {
		t.Error("no architecture has a minimum build: the numbers were lost")
	}
	// Every line that is not blank or a comment is an entry.
	entries := 0
	for line := range strings.Lines(architectures) {
		if content, _, _ := strings.Cut(line, "#"); strings.TrimSpace(content) != "" {
			entries++
		}
	}
	if entries != len(k) {
		t.Errorf("%d entry lines, %d architectures read", entries, len(k))
	}
}

func TestParseArchitectures(t *testing.T) {
	good := []struct {
		name, text string
		want       Known
	}{
		{"name alone", "llama\n", Known{"llama": 0}},
		{"name and build", "qwen3 5092\n", Known{"qwen3": 5092}},
		{"comments and blanks", "# heading\n\nqwen3\t5092 # from the release tag\n  llama  \n", Known{"qwen3": 5092, "llama": 0}},
		{"no final newline", "llama", Known{"llama": 0}},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			k, err := parseArchitectures(tc.text)
			if err != nil {
				t.Fatal(err)
			}
			if len(k) != len(tc.want) {
				t.Fatalf("got %v, want %v", k, tc.want)
			}
			for n, min := range tc.want {
				if got, ok := k[n]; !ok || got != min {
					t.Errorf("%s: got %d (listed %v), want %d", n, got, ok, min)
				}
			}
		})
	}
	bad := []struct{ name, text string }{
		{"tag, not number", "qwen3 b5092\n"},
		{"zero", "qwen3 0\n"},
		{"negative", "qwen3 -1\n"},
		{"too large", "qwen3 1000000\n"},
		{"not a number", "qwen3 latest\n"},
		{"three fields", "qwen3 5092 5093\n"},
		{"listed twice", "qwen3 5092\nqwen3\n"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			if k, err := parseArchitectures(tc.text); err == nil {
				t.Errorf("read %q as %v: want an error", tc.text, k)
			}
		})
	}
}

package fleet

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modelserve/internal/llamatest"
)

// fakeNvidiaSMI puts an nvidia-smi on PATH that reports cards as the real
// one answers the query plan.LocalNode asks (name, memory.total and
// memory.used in MiB, no header, no units).
func fakeNvidiaSMI(t *testing.T, lines ...string) {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\ncat <<'EOF'\n" + strings.Join(lines, "\n") + "\nEOF\n"
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// listingEngine is a llama-server stand-in that lists devices as a GPU
// build does; what it lists is the only thing made up.
func listingEngine(t *testing.T, devices ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "llama-server")
	script := "#!/bin/sh\nprintf 'Available devices:\\n'\n"
	for _, d := range devices {
		script += fmt.Sprintf("printf '  %%s\\n' %q\n", d)
	}
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCardsTheEngineCannotUseAreNotCounted: on a machine whose nvidia-smi
// reports two L4s, the installed llama-server (a CPU-only build, asked for
// real) lists no device, so the node counts no card, and says why and
// what to do.
func TestCardsTheEngineCannotUseAreNotCounted(t *testing.T) {
	fakeNvidiaSMI(t, "NVIDIA L4, 23034, 0", "NVIDIA L4, 23034, 100")
	n, err := Local(LocalConfig{Engine: llamatest.Path(t)})
	if err != nil {
		t.Fatal(err)
	}
	c := n.Capacity()
	if len(c.GPUs) != 0 {
		t.Errorf("the node counts cards %+v the engine cannot use", c.GPUs)
	}
	if want := "2×L4 seen; the engine build has no GPU backend: install one or set --llama-server"; c.Note != want {
		t.Errorf("the node's note is %q, want %q", c.Note, want)
	}
}

func TestCardsTheEngineListsAreCounted(t *testing.T) {
	tests := []struct {
		name    string
		devices []string
		cards   int
		note    string
	}{
		{"both on CUDA", []string{"CUDA0: NVIDIA L4 (22478 MiB, 22000 MiB free)", "CUDA1: NVIDIA L4 (22478 MiB, 22000 MiB free)"}, 2, ""},
		{"both on Vulkan", []string{"Vulkan0: NVIDIA L4 (23034 MiB, 23000 MiB free)", "Vulkan1: NVIDIA L4 (23034 MiB, 23000 MiB free)"}, 2, ""},
		{"one of two", []string{"CUDA0: NVIDIA L4 (22478 MiB, 22000 MiB free)"}, 1,
			"2×L4 seen; the engine lists CUDA0 only, so 1×L4 not counted: check the cards' driver, or set --llama-server to a build that uses them"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fakeNvidiaSMI(t, "NVIDIA L4, 23034, 0", "NVIDIA L4, 23034, 0")
			n, err := Local(LocalConfig{Engine: listingEngine(t, tt.devices...)})
			if err != nil {
				t.Fatal(err)
			}
			c := n.Capacity()
			if len(c.GPUs) != tt.cards || c.Note != tt.note {
				t.Errorf("cards %+v, note %q; want %d cards and %q", c.GPUs, c.Note, tt.cards, tt.note)
			}
			for i, card := range c.GPUs {
				if card.Index != i || card.Class != "L4" {
					t.Errorf("card %d is %+v, want L4 number %d", i, card, i)
				}
			}
		})
	}
}

// TestCardsKeepNvidiaSMIsNumbers: on a machine whose cards of two classes
// are interleaved, each card the node counts keeps its class and its
// number in nvidia-smi's order, the number the fleet places a replica on
// (CUDA_VISIBLE_DEVICES); read through the planner's grouping by class,
// the second L4 took the T4's number.
func TestCardsKeepNvidiaSMIsNumbers(t *testing.T) {
	fakeNvidiaSMI(t, "NVIDIA L4, 23034, 0", "Tesla T4, 15360, 0", "NVIDIA L4, 23034, 0")
	n, err := Local(LocalConfig{Engine: listingEngine(t, "CUDA0: NVIDIA L4 (22478 MiB, 22000 MiB free)",
		"CUDA1: Tesla T4 (15000 MiB, 15000 MiB free)", "CUDA2: NVIDIA L4 (22478 MiB, 22000 MiB free)")})
	if err != nil {
		t.Fatal(err)
	}
	want := []Card{{Index: 0, Class: "L4", MemoryBytes: 23034 << 20}, {Index: 1, Class: "T4", MemoryBytes: 15360 << 20},
		{Index: 2, Class: "L4", MemoryBytes: 23034 << 20}}
	got := n.Capacity().GPUs
	if len(got) != len(want) {
		t.Fatalf("cards %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("card %d is %+v, want %+v", i, got[i], want[i])
		}
	}
}

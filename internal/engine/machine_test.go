package engine_test

import (
	"strings"
	"testing"

	"modelserve/internal/engine"
)

func TestParseMeminfo(t *testing.T) {
	cases := []struct {
		name        string
		text        string
		total, free int64
		err         string
	}{
		{name: "a current kernel", text: "MemTotal:       24683620 kB\nMemFree:        22036816 kB\nMemAvailable:   24141404 kB\nBuffers:           33500 kB\nCached:          2251732 kB\n",
			total: 24683620 << 10, free: 24141404 << 10},
		{name: "a kernel before MemAvailable", text: "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 20 kB\nCached: 300 kB\nSwapTotal: 0 kB\n",
			total: 1000 << 10, free: 420 << 10},
		{name: "huge pages and lines without units", text: "MemTotal: 2048 kB\nMemAvailable: 1024 kB\nHugePages_Total:       0\n",
			total: 2048 << 10, free: 1024 << 10},
		{name: "no MemTotal", text: "MemFree: 100 kB\n", err: "/proc/meminfo has no MemTotal line: this machine's memory cannot be read"},
		{name: "not a number", text: "MemTotal: lots kB\n", err: `/proc/meminfo's MemTotal line is not a number of kB: "lots kB"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			total, free, err := engine.ParseMeminfo(strings.NewReader(tc.text))
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error %v; want %q", err, tc.err)
				}
				return
			}
			if err != nil || total != tc.total || free != tc.free {
				t.Errorf("ParseMeminfo = %d, %d, %v; want %d, %d", total, free, err, tc.total, tc.free)
			}
		})
	}
}

// TestParseNvidiaSMI: nvidia-smi's cards in its order, with their
// memory and its use in bytes; [N/A] for the use is none.
func TestParseNvidiaSMI(t *testing.T) {
	cards, err := engine.ParseNvidiaSMI([]byte("NVIDIA L4, 23034, 20000\nTesla T4, 15360, [N/A]\n"))
	want := []engine.Card{{Index: 0, Name: "NVIDIA L4", MemoryBytes: 23034 << 20, UsedBytes: 20000 << 20},
		{Index: 1, Name: "Tesla T4", MemoryBytes: 15360 << 20}}
	if err != nil || len(cards) != len(want) || cards[0] != want[0] || cards[1] != want[1] {
		t.Errorf("ParseNvidiaSMI = %+v, %v; want %+v", cards, err, want)
	}
	if _, err := engine.ParseNvidiaSMI([]byte(strings.Repeat("NVIDIA L4, 23034, 0\n", 257))); err == nil {
		t.Error("a list of 257 cards was read whole")
	}
}

package engine_test

import (
	"context"
	"os/exec"
	"testing"

	"modelserve/internal/engine"
	"modelserve/internal/llamatest"
)

// TestTheInstalledBuildListsNoDevices asks the real engine: Debian's build
// without a GPU backend package lists no device, and the list is read as
// such rather than as a failure.
func TestTheInstalledBuildListsNoDevices(t *testing.T) {
	devs, err := engine.ReadDevices(context.Background(), llamatest.Path(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 0 {
		t.Errorf("the installed CPU-only build lists %+v; want no device", devs)
	}
}

func TestParseDevices(t *testing.T) {
	tests := []struct {
		name string
		out  string
		want []engine.Device
		err  bool
	}{
		{name: "none", out: "Available devices:\n  (none)\n", want: []engine.Device{}},
		{name: "two cards", out: "Available devices:\n  CUDA0: NVIDIA L4 (22478 MiB, 22142 MiB free)\n  CUDA1: NVIDIA L4 (22478 MiB, 100 MiB free)\n",
			want: []engine.Device{{Name: "CUDA0", Description: "NVIDIA L4", MemoryBytes: 22478 << 20, FreeBytes: 22142 << 20},
				{Name: "CUDA1", Description: "NVIDIA L4", MemoryBytes: 22478 << 20, FreeBytes: 100 << 20}}},
		{name: "vulkan, parentheses in the name", out: "load_backend: loaded Vulkan backend\nAvailable devices:\n  Vulkan0: AMD Radeon (TM) Pro (16368 MiB, 16000 MiB free)\n",
			want: []engine.Device{{Name: "Vulkan0", Description: "AMD Radeon (TM) Pro", MemoryBytes: 16368 << 20, FreeBytes: 16000 << 20}}},
		{name: "log after the list", out: "Available devices:\n  CUDA0: NVIDIA A100-SXM4-80GB (81050 MiB, 80000 MiB free)\nsome log line\n  CUDA9: x (1 MiB, 1 MiB free)\n",
			want: []engine.Device{{Name: "CUDA0", Description: "NVIDIA A100-SXM4-80GB", MemoryBytes: 81050 << 20, FreeBytes: 80000 << 20}}},
		{name: "no list", out: "error: invalid argument: --list-devices\n", err: true},
		{name: "more free than total", out: "Available devices:\n  CUDA0: NVIDIA L4 (100 MiB, 200 MiB free)\n", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := engine.ParseDevices(tt.out)
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want an error: %v", err, tt.err)
			}
			if tt.err {
				return
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("device %d: got %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// TestTheInstalledCopyStartsWithoutItsShell: the command line the
// installer wrote beside the installed copy starts the real engine.
func TestTheInstalledCopyStartsWithoutItsShell(t *testing.T) {
	path := llamatest.Path(t)
	argv := engine.Command(path)
	if len(argv) < 2 {
		t.Fatalf("the installed copy starts as %q: the installer wrote no command line beside it", argv)
	}
	out, err := exec.Command(argv[0], append(argv[1:], "--version")...).CombinedOutput()
	if _, ok := engine.ParseVersion(string(out)); err != nil || !ok {
		t.Fatalf("%q --version: %v\n%s", argv, err, out)
	}
}

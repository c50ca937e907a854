package engine

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Device is one device a llama-server build can compute on, as
// `llama-server --list-devices` lists it:
//
//	CUDA0: NVIDIA L4 (22478 MiB, 22142 MiB free)
//
// A CPU-only build lists none. The cards the machine has are not the cards
// the engine can use: Debian's build, for one, carries no GPU backend
// unless its CUDA or Vulkan backend package is installed beside it.
type Device struct {
	// Name is the engine's own ("CUDA0", "Vulkan1"); its backend is the
	// name without the number.
	Name string
	// Description is the device's name as its driver reports it, which
	// for an NVIDIA card is the name nvidia-smi prints ("NVIDIA L4").
	Description string
	MemoryBytes int64
	FreeBytes   int64
}

// Backend is the device's backend: "CUDA" for CUDA0.
func (d Device) Backend() string { return strings.TrimRight(d.Name, "0123456789") }

// maxDevices bounds what is read from an engine's list: no machine has more.
const maxDevices = 256

var (
	devicesHeader = regexp.MustCompile(`(?m)^Available devices:\s*$`)
	// The memory figures are the last parentheses on the line: a
	// description may hold parentheses of its own.
	deviceLine = regexp.MustCompile(`^\s+([A-Za-z][A-Za-z0-9_-]*\d+): (.*) \((\d+) MiB, (\d+) MiB free\)\s*$`)
)

// ParseDevices reads the output of `llama-server --list-devices`: the
// lines after "Available devices:", one device each, or "(none)". Log
// lines the engine prints before the list (backends it loaded, or failed
// to) are skipped.
func ParseDevices(out string) ([]Device, error) {
	loc := devicesHeader.FindStringIndex(out)
	if loc == nil {
		return nil, fmt.Errorf("the engine's device list has no \"Available devices:\" line: %s", strings.TrimSpace(lastLines(out, 3)))
	}
	devs := []Device{}
	for _, line := range strings.Split(out[loc[1]:], "\n") {
		if strings.TrimSpace(line) == "" || strings.TrimSpace(line) == "(none)" {
			continue
		}
		m := deviceLine.FindStringSubmatch(line)
		if m == nil {
			// The list is the lines that look like devices; anything after
			// it is the engine's own log.
			break
		}
		total, err1 := strconv.ParseInt(m[3], 10, 64)
		free, err2 := strconv.ParseInt(m[4], 10, 64)
		if err1 != nil || err2 != nil || total > 1<<30 || free > total {
			return nil, fmt.Errorf("the engine lists %s with memory figures that do not add up: %q", m[1], strings.TrimSpace(line))
		}
		if len(devs) == maxDevices {
			return nil, fmt.Errorf("the engine lists more than %d devices", maxDevices)
		}
		devs = append(devs, Device{Name: m[1], Description: strings.TrimSpace(m[2]), MemoryBytes: total << 20, FreeBytes: free << 20})
	}
	return devs, nil
}

// ReadDevices runs `path --list-devices` and parses what it prints (to
// stdout; the backends' own messages go to stderr, and are kept for the
// error when the list cannot be read).
func ReadDevices(ctx context.Context, path string) ([]Device, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--list-devices")
	cmd.Env = Environ(os.Environ())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list-devices failed: %w: %s", path, err, strings.TrimSpace(lastLines(stderr.String()+string(out), 3)))
	}
	return ParseDevices(string(out))
}

// GPUBackends are the backends that run on an NVIDIA card, the one a fleet
// prefers first. CUDA honours CUDA_VISIBLE_DEVICES and Vulkan
// GGML_VK_VISIBLE_DEVICES, which the fleet sets to the cards it placed on.
var GPUBackends = []string{"CUDA", "Vulkan"}

// GPUDevices are the devices of the first of GPUBackends that devs list:
// the cards an engine build computes on. A CPU-only build has none.
func GPUDevices(devs []Device) []Device {
	for _, b := range GPUBackends {
		var listed []Device
		for _, d := range devs {
			if d.Backend() == b {
				listed = append(listed, d)
			}
		}
		if len(listed) > 0 {
			return listed
		}
	}
	return nil
}

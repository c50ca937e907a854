package engine

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Which hardware a node has, and which of it an engine can use, is read
// here and only here: the machine's cores, its memory (/proc/meminfo), its
// NVIDIA cards (nvidia-smi) and the devices a llama-server build lists
// (devices.go). The planner's pool and the local fleet's node each read it
// once through this package; they had each their own reading, and the
// fleet rebuilt the cards from the planner's grouping by class.

// Machine is this machine's hardware as it reads now.
type Machine struct {
	// Name is the host name ("local" when it has none).
	Name     string
	CPUCores int
	// RAMBytes is its memory, and AvailableBytes how much of it a new
	// process can have (ReadMemory).
	RAMBytes       int64
	AvailableBytes int64
	// Cards are its NVIDIA cards as nvidia-smi lists them, in its order:
	// none without nvidia-smi. Note says why none are counted when
	// nvidia-smi is installed and could not be read.
	Cards []Card
	Note  string
}

// Card is one card as nvidia-smi reports it: its index in nvidia-smi's
// order (CUDA_VISIBLE_DEVICES's), its name ("NVIDIA L4"), its memory and
// how much of it is in use (0 where nvidia-smi says [N/A]).
type Card struct {
	Index       int
	Name        string
	MemoryBytes int64
	UsedBytes   int64
}

// ReadMachine reads this machine: its cores, its memory and its cards.
// A failing nvidia-smi leaves it without cards and says so in Note.
func ReadMachine(ctx context.Context) (Machine, error) {
	total, avail, err := ReadMemory()
	if err != nil {
		return Machine{}, err
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "local"
	}
	m := Machine{Name: host, CPUCores: runtime.NumCPU(), RAMBytes: total, AvailableBytes: avail, Cards: []Card{}}
	smi, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return m, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, smi, "--query-gpu=name,memory.total,memory.used",
		"--format=csv,noheader,nounits").Output()
	if err == nil {
		m.Cards, err = ParseNvidiaSMI(out)
	}
	if err != nil {
		m.Cards = []Card{}
		m.Note = "nvidia-smi is installed but its cards could not be read, so none are counted: " + err.Error()
	}
	return m, nil
}

// ReadMemory is this machine's memory and how much of it a new process
// can have now, from /proc/meminfo.
func ReadMemory() (total, available int64, err error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0, fmt.Errorf("reading this machine's memory: %w", err)
	}
	defer f.Close()
	return ParseMeminfo(f)
}

// ParseMeminfo reads /proc/meminfo's text: the machine's memory and how
// much of it a new process can have (MemAvailable; on kernels before 3.14,
// which lack it, free plus buffers plus page cache), in bytes.
func ParseMeminfo(r io.Reader) (total, available int64, err error) {
	vals := map[string]int64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/meminfo's %s line is not a number of kB: %q", key, strings.TrimSpace(rest))
		}
		if len(fields) > 1 && fields[1] == "kB" {
			v *= 1024
		}
		vals[key] = v
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("reading /proc/meminfo: %w", err)
	}
	total, ok := vals["MemTotal"]
	if !ok || total <= 0 {
		return 0, 0, errors.New("/proc/meminfo has no MemTotal line: this machine's memory cannot be read")
	}
	available, ok = vals["MemAvailable"]
	if !ok {
		available = vals["MemFree"] + vals["Buffers"] + vals["Cached"]
	}
	return total, min(available, total), nil
}

// maxCards bounds what is read of nvidia-smi's list: no machine has more.
const maxCards = maxDevices

// ParseNvidiaSMI reads the output of
// `nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader,nounits`
// (one card a line, memory in MiB) into the machine's cards, in its order.
func ParseNvidiaSMI(out []byte) ([]Card, error) {
	cards := []Card{}
	for i, line := range strings.Split(string(bytes.TrimSpace(out)), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if len(cards) == maxCards {
			return nil, fmt.Errorf("nvidia-smi lists more than %d cards", maxCards)
		}
		// The name comes first and never holds a comma; the two figures
		// are the last fields.
		parts := strings.Split(line, ",")
		if len(parts) < 3 {
			return nil, fmt.Errorf("line %d of nvidia-smi's output is not name, memory.total, memory.used: %q", i+1, line)
		}
		name := strings.TrimSpace(strings.Join(parts[:len(parts)-2], ","))
		totalMiB, err := strconv.ParseFloat(strings.TrimSpace(parts[len(parts)-2]), 64)
		if err != nil || totalMiB <= 0 || totalMiB > 1<<30 {
			return nil, fmt.Errorf("line %d of nvidia-smi's output gives no memory size for %s: %q", i+1, name, line)
		}
		// "[N/A]" for the memory used (some virtual GPUs): counted as
		// all free, as nothing says otherwise.
		usedMiB, err := strconv.ParseFloat(strings.TrimSpace(parts[len(parts)-1]), 64)
		if err != nil || usedMiB < 0 {
			usedMiB = 0
		}
		cards = append(cards, Card{Index: len(cards), Name: name,
			MemoryBytes: int64(totalMiB * (1 << 20)), UsedBytes: int64(min(usedMiB, totalMiB) * (1 << 20))})
	}
	return cards, nil
}

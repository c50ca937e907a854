package fleet

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	"modelserve/catalog"
	"modelserve/internal/engine"
	"modelserve/internal/plan"
)

// Node is a machine replicas run on. The local node is this machine; a
// remote node would start engines through an agent, behind the same three
// methods.
type Node interface {
	Name() string
	// Capacity is what the node has, with its memory as measured now.
	Capacity() Capacity
	// Start runs an engine and returns once it is started, not loaded; ctx
	// bounds the starting only, not the process's life (Process.Stop ends
	// that).
	Start(ctx context.Context, spec Spec) (Process, error)
}

// Capacity is a node's hardware.
type Capacity struct {
	CPUCores int
	// RAMBytes is the node's memory; AvailableBytes what the kernel says a
	// new process could have now (MemAvailable).
	RAMBytes       int64
	AvailableBytes int64
	GPUs           []Card
	// Note says, when there is something to say, which of the machine's
	// cards are left out of GPUs and why (the engine cannot use them).
	Note string
}

// CouldHost is whether hardware of capacity c could host a replica of p,
// were it idle: its cores, its RAM, and enough cards of p's class with
// what p holds on each (a card whose memory is not known is taken to have
// it). Both fleets ask it, so "no node could ever host it" means the same
// on either.
func CouldHost(p catalog.Profile, c Capacity) bool {
	if p.CPUCores > 0 && c.CPUCores > 0 && c.CPUCores < p.CPUCores || c.RAMBytes < p.HostBytes() {
		return false
	}
	if p.GPUClass == "" {
		return true
	}
	n := 0
	for _, card := range c.GPUs {
		if strings.EqualFold(card.Class, p.GPUClass) && (card.MemoryBytes == 0 || card.MemoryBytes >= p.CardBytes) {
			n++
		}
	}
	return n >= p.Cards()
}

// Card is one GPU of a node.
type Card struct {
	// Index is the card's number for CUDA_VISIBLE_DEVICES.
	Index       int
	Class       string
	MemoryBytes int64
}

// Spec is an engine to start. The node adds the address it listens on.
type Spec struct {
	Engine string
	Args   []string
	// Env is the engine's own environment (KEY=value): its key, its cards
	// and its profile's settings, added to the little a local engine keeps
	// of modelserve's (engineEnviron).
	Env []string
	// Output receives the engine's stdout and stderr, unless LogFile is
	// set.
	Output io.Writer
	// LogFile, when set, is the file the engine writes its output to
	// (truncated first) in place of Output: the engine then outlives
	// modelserve, in a session of its own, for the next modelserve to
	// adopt (Engines).
	LogFile string
}

// Process is a started engine.
type Process interface {
	PID() int
	// Endpoint is its base URL, "http://host:port".
	Endpoint() string
	// Done is closed once the process has exited and been reaped; Err is
	// then how it exited.
	Done() <-chan struct{}
	Err() error
	// Stop asks the engine to stop, kills it after grace, and returns once
	// it has exited. It is safe to call more than once, and after an exit.
	Stop(grace time.Duration)
	// RSS is the resident memory of the engine and its children, in bytes;
	// 0 when it cannot be read.
	RSS() int64
}

// ErrEngineMissing is an engine executable that is not there: no restart
// can fix it, so the model is parked at once.
var ErrEngineMissing = errors.New("the engine is not installed")

// LocalConfig describes the local node. Zero fields are read from the
// machine; set ones replace what was read, so tests can run real engines on
// a node that pretends to have less memory.
type LocalConfig struct {
	Name     string
	CPUCores int
	// RAMBytes, when set, is the node's memory, all of it taken to be
	// available (a stand-in node is not measured).
	RAMBytes int64
	// GPUs, when not nil, replace the cards read from nvidia-smi.
	GPUs []Card
	// Engine is the llama-server whose own device list decides which of
	// the cards read from nvidia-smi are counted (engine.Find's choice
	// when empty); cards given in GPUs are taken as they are.
	Engine string
	// Budget, when set, is the memory the fleet may promise on this
	// machine (--local-memory): the node's memory in the pool. Unlike
	// RAMBytes the machine is still measured, and no more than the kernel
	// has available is promised, for a machine shared with other programs.
	Budget int64
}

// LocalNode runs engines as child processes of this one, on loopback.
type LocalNode struct {
	name     string
	cores    int
	ram      int64
	measured bool // read MemAvailable on each look, rather than RAMBytes
	budget   int64
	gpus     []Card
	note     string // what was left out of gpus, and why
}

// Local is this machine as a node: its cores, memory and cards as the
// engine package reads them (each card of its planner's class, at its
// index in nvidia-smi's order), with what cfg sets in their place.
func Local(cfg LocalConfig) (*LocalNode, error) {
	n := &LocalNode{name: cfg.Name, cores: cfg.CPUCores, ram: cfg.RAMBytes, gpus: cfg.GPUs, budget: max(cfg.Budget, 0)}
	if n.name != "" && n.cores > 0 && n.ram > 0 && n.gpus != nil && n.budget == 0 {
		return n, nil
	}
	m, err := engine.ReadMachine(context.Background())
	if err != nil {
		return nil, err
	}
	if n.name == "" {
		n.name = m.Name
	}
	if n.cores <= 0 {
		n.cores = m.CPUCores
	}
	if n.ram <= 0 {
		n.ram, n.measured = m.RAMBytes, true
	}
	if n.gpus == nil {
		for _, c := range m.Cards {
			n.gpus = append(n.gpus, Card{Index: c.Index, Class: plan.CardClass(c.Name, c.MemoryBytes), MemoryBytes: c.MemoryBytes})
		}
		if len(n.gpus) > 0 {
			path, _, _ := engine.Find(cfg.Engine)
			n.gpus, n.note = engineCards(context.Background(), path, n.gpus)
		}
	}
	if m.Note != "" {
		n.note = m.Note
	}
	return n, nil
}

// Name is the node's name: the host name unless configured.
func (n *LocalNode) Name() string { return n.name }

// Capacity reads the machine's available memory now, for a measured node.
func (n *LocalNode) Capacity() Capacity {
	c := Capacity{CPUCores: n.cores, RAMBytes: n.ram, AvailableBytes: n.ram, GPUs: n.gpus, Note: n.note}
	if n.measured {
		if total, avail, err := engine.ReadMemory(); err == nil {
			c.RAMBytes, c.AvailableBytes = total, avail
		}
	}
	if n.budget > 0 {
		c.RAMBytes, c.AvailableBytes = n.budget, min(n.budget, c.AvailableBytes)
	}
	return c
}

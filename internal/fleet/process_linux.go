package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"modelserve/internal/engine"
)

// Start runs the engine on a free loopback port, in a process group of its
// own so that it can be stopped with whatever it starts.
func (n *LocalNode) Start(_ context.Context, spec Spec) (Process, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	// The installed copy starts as its wrapper would exec it, without
	// the shell (engine.Command).
	argv := engine.Command(spec.Engine)
	args := append(append(argv[1:len(argv):len(argv)], spec.Args...), "--host", "127.0.0.1", "--port", strconv.Itoa(port))
	cmd := exec.Command(argv[0], args...)
	cmd.Env = engineEnviron(os.Environ(), spec.Env)
	cmd.Stdout, cmd.Stderr = spec.Output, spec.Output
	// Pdeathsig: should modelserve itself be killed, its engines die with
	// it, so a restart never finds an old engine holding memory it does
	// not know of.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// A grandchild that keeps the output pipe open must not hold Wait; the
	// group is killed before Wait anyway.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("%w: %s: %v", ErrEngineMissing, spec.Engine, err)
		}
		return nil, fmt.Errorf("start %s: %w", filepath.Base(spec.Engine), err)
	}
	p := &localProcess{cmd: cmd, pid: cmd.Process.Pid, endpoint: "http://127.0.0.1:" + strconv.Itoa(port), done: make(chan struct{})}
	go p.wait()
	return p, nil
}

// freePort is a loopback port nothing listens on now. The engine binds it a
// moment later; should another process take it first, the engine exits and
// the replica is restarted on another.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

type localProcess struct {
	cmd      *exec.Cmd
	pid      int
	endpoint string
	done     chan struct{}
	err      error

	// mu orders signals against the reaping: the group is signalled only
	// while its leader is unreaped (alive or a zombie), when its id cannot
	// name anyone else's processes.
	mu     sync.Mutex
	reaped bool
}

func (p *localProcess) PID() int              { return p.pid }
func (p *localProcess) Endpoint() string      { return p.endpoint }
func (p *localProcess) Done() <-chan struct{} { return p.done }

func (p *localProcess) Err() error {
	<-p.done
	return p.err
}

// wait waits for the engine to exit without reaping it, kills what it
// leaves in its group, and only then reaps it.
func (p *localProcess) wait() {
	waitExited(p.pid)
	p.mu.Lock()
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	p.reaped = true
	p.mu.Unlock()
	p.err = p.cmd.Wait()
	close(p.done)
}

// signal sends sig to the engine's process group unless it is reaped.
func (p *localProcess) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.reaped {
		_ = syscall.Kill(-p.pid, sig)
	}
}

func (p *localProcess) Stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	p.signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return
	case <-t.C:
	}
	p.signal(syscall.SIGKILL)
	<-p.done
}

// waitExited blocks until the process pid has exited, leaving it a zombie
// (waitid with WNOWAIT): its id stays taken until it is reaped.
func waitExited(pid int) {
	const pPID = 1     // P_PID
	var info [128]byte // siginfo_t
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		if e != syscall.EINTR {
			return
		}
	}
}

// RSS sums VmRSS over the engine's process group: the engine may run its
// work in children.
func (p *localProcess) RSS() int64 {
	p.mu.Lock()
	reaped := p.reaped
	p.mu.Unlock()
	if reaped {
		return 0
	}
	return groupRSS(p.pid)
}

// groupRSS is the resident memory of the processes in group pgid, read
// from /proc.
func groupRSS(pgid int) int64 {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var total int64
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pid != pgid && processGroup(pid) != pgid {
			continue
		}
		total += vmRSS(pid)
	}
	return total
}

// processGroup is field 5 of /proc/<pid>/stat, after the command name,
// which may itself hold spaces and parentheses.
func processGroup(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 {
		return -1
	}
	g, err := strconv.Atoi(string(f[2]))
	if err != nil {
		return -1
	}
	return g
}

// vmRSS is the VmRSS line of /proc/<pid>/status, in bytes.
func vmRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			f := bytes.Fields(v)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(string(f[0]), 10, 64)
				if err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}

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
	if spec.LogFile != "" {
		// An engine that outlives modelserve writes to a file, not to a
		// pipe that would die with modelserve (its next line would be
		// its SIGPIPE), and runs in a session of its own, out of reach of
		// the terminal's and the service manager's signals to modelserve.
		out, err := os.OpenFile(spec.LogFile, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("the engine's log %s cannot be written: %w", spec.LogFile, err)
		}
		defer out.Close() // the engine has its own copy once started
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.Stdout, cmd.Stderr = spec.Output, spec.Output
		// Pdeathsig: an engine nothing could adopt dies with modelserve,
		// so a restart never finds an old engine holding memory it does
		// not know of.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
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
	f, ok := statFields(pid)
	if !ok || len(f) < 3 {
		return -1
	}
	g, err := strconv.Atoi(string(f[2]))
	if err != nil {
		return -1
	}
	return g
}

// statFields are the fields of /proc/<pid>/stat from the third (the
// state) on: after the command name, which may itself hold spaces and
// parentheses.
func statFields(pid int) ([][]byte, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, false
	}
	return bytes.Fields(b[i+1:]), true
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

// identity names a process beyond its pid, which the kernel gives again
// once it has exited: when it started (field 22 of /proc/PID/stat, in
// clock ticks since boot), its binary (/proc/PID/exe) and its user.
type identity struct {
	start uint64
	exe   string
	uid   int
}

// identify is the identity of the live process pid; false when there is
// none (or only its zombie), or it cannot be read (another user's).
func identify(pid int) (identity, bool) {
	if pid <= 0 {
		return identity{}, false
	}
	dir := "/proc/" + strconv.Itoa(pid)
	f, ok := statFields(pid)
	if !ok || len(f) < 20 || f[0][0] == 'Z' || f[0][0] == 'X' {
		return identity{}, false
	}
	start, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return identity{}, false
	}
	exe, err := os.Readlink(dir + "/exe")
	if err != nil {
		return identity{}, false
	}
	st, err := os.Stat(dir)
	if err != nil {
		return identity{}, false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return identity{}, false
	}
	return identity{start: start, exe: exe, uid: int(sys.Uid)}, true
}

// is whether pid is still the process id names.
func (id identity) is(pid int) bool {
	now, ok := identify(pid)
	return ok && now == id
}

// adoptedProcess is an engine a modelserve before this one started, taken
// back (Adopt): not this process's child, so nothing waits for it; its
// exit is noticed by its identity, looked at every adoptedPoll.
type adoptedProcess struct {
	pid      int
	id       identity
	endpoint string
	done     chan struct{}
	once     sync.Once
}

// adoptedPoll is how often an adopted engine is looked for; its /health
// is asked besides, as any ready engine's is.
const adoptedPoll = 250 * time.Millisecond

// adopt follows the engine pid named id until it exits or ctx ends.
func adopt(ctx context.Context, pid int, id identity, endpoint string) *adoptedProcess {
	p := &adoptedProcess{pid: pid, id: id, endpoint: endpoint, done: make(chan struct{})}
	go func() {
		t := time.NewTicker(adoptedPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.done:
				return
			case <-t.C:
				if !id.is(pid) {
					p.gone()
				}
			}
		}
	}()
	return p
}

func (p *adoptedProcess) gone()                 { p.once.Do(func() { close(p.done) }) }
func (p *adoptedProcess) PID() int              { return p.pid }
func (p *adoptedProcess) Endpoint() string      { return p.endpoint }
func (p *adoptedProcess) Done() <-chan struct{} { return p.done }

// Err is how it exited, as far as a process that is not its parent can
// tell: not at all.
func (p *adoptedProcess) Err() error {
	<-p.done
	return nil
}

// Stop stops the engine's group as Stop does a child's, the identity
// checked again before each signal: its pid may be another's by then.
func (p *adoptedProcess) Stop(grace time.Duration) {
	stopByIdentity(p.pid, p.id, grace)
	p.gone()
}

func (p *adoptedProcess) RSS() int64 {
	if !p.id.is(p.pid) {
		return 0
	}
	return groupRSS(p.pid)
}

// stopByIdentity sends SIGTERM to the group of the process pid named id
// (its session's leader, so the group's id is its pid), SIGKILL after
// grace, and returns once it is gone or a bound past that; a signal is
// sent only while pid is still that process.
func stopByIdentity(pid int, id identity, grace time.Duration) {
	for _, step := range []struct {
		sig  syscall.Signal
		wait time.Duration
	}{{syscall.SIGTERM, grace}, {syscall.SIGKILL, 5 * time.Second}} {
		if !id.is(pid) {
			return
		}
		_ = syscall.Kill(-pid, step.sig)
		for end := time.Now().Add(step.wait); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if !id.is(pid) {
				return
			}
		}
	}
}

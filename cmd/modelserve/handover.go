package main

// The handover: modelserve upgrades or restarts without ever closing its
// port. On SIGHUP (or `modelserve serve --upgrade` for the same data
// folder, which sends it) the running process starts the binary on disk
// again with its own arguments and hands it the listening socket, as
// nginx and tableflip do: the socket's fd goes to the child, and an
// environment variable names it. The child says when it serves through a
// pipe; only then does the old process stop accepting, finish what it
// was answering, and exit. Connections queue in the socket's backlog
// meanwhile, so no client is refused. A child that fails to start, or
// does not say it is ready in time, is stopped, and the old process
// serves on and says why.

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"modelserve/internal/fleet"
	"modelserve/jobs"
)

// The environment a handed-over process finds its socket and its ready
// pipe by: each names a file descriptor it inherited.
const (
	listenFDEnv = "MODELSERVE_LISTEN_FD"
	readyFDEnv  = "MODELSERVE_READY_FD"
)

// Bounds of a handover.
const (
	// childReadyWithin is the longest the old process waits for the new
	// one to say it serves before it stops it and serves on.
	childReadyWithin = 2 * time.Minute
	// fleetReadyWithin is the longest a new process waits for its fleet
	// to have the replicas the catalog asks for before it says it is
	// ready anyway: a model that cannot start must not hold an upgrade.
	fleetReadyWithin = 90 * time.Second
	// jobsBoundaryWithin is the longest the old process waits for its
	// jobs to reach the end of the step they are in; one still inside a
	// step then is stopped there, and carries it on in the new process.
	jobsBoundaryWithin = 10 * time.Second
	// childStopWithin is the longest a failed child is given to stop on
	// SIGTERM before it is killed.
	childStopWithin = 30 * time.Second
)

// The data folder's files of the handover: which process serves it (its
// pid and start time), and how the last handover ended, for --upgrade.
const (
	pidFileName    = "modelserve.pid"
	handoverResult = "modelserve.handover"
)

// listen is the socket modelserve serves on: the one a previous process
// handed over, else the one systemd opened (socket activation), else a
// new one on addr. how says which, for the log.
func listen(addr string) (ln net.Listener, how string, err error) {
	if v := os.Getenv(listenFDEnv); v != "" {
		os.Unsetenv(listenFDEnv)
		ln, err := inherited(v, "the previous modelserve")
		return ln, "handed over by the previous modelserve", err
	}
	// systemd's protocol: the fds start at 3, and LISTEN_PID says they
	// are meant for this process and not one it started.
	if pid, fds := os.Getenv("LISTEN_PID"), os.Getenv("LISTEN_FDS"); pid != "" && fds != "" {
		os.Unsetenv("LISTEN_PID")
		os.Unsetenv("LISTEN_FDS")
		os.Unsetenv("LISTEN_FDNAMES")
		if pid == strconv.Itoa(os.Getpid()) {
			if fds != "1" {
				return nil, "", fmt.Errorf("systemd passed %s sockets (LISTEN_FDS); modelserve serves on one: give its socket unit one ListenStream", fds)
			}
			ln, err := inherited("3", "systemd")
			return ln, "opened by systemd", err
		}
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("cannot listen on %s: %w", addr, err)
	}
	return ln, "opened", nil
}

// inherited is the listening socket at file descriptor fd, which from
// passed on.
func inherited(fd, from string) (net.Listener, error) {
	n, err := strconv.Atoi(fd)
	if err != nil || n < 3 {
		return nil, fmt.Errorf("the socket %s passed is fd %q, which is not a file descriptor after stdio", from, fd)
	}
	f := os.NewFile(uintptr(n), "listener")
	defer f.Close() // FileListener holds its own copy
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("fd %d that %s passed is not a listening socket: %w", n, from, err)
	}
	return ln, nil
}

// handover is the old process's side: it starts the new one and waits
// for it to serve.
type handover struct {
	ln    net.Listener
	data  string
	jobs  *jobs.Server
	fleet *fleetRun
	// gateway answers the requests waiting for a replica to start once
	// this process has let go of the port (gateway.Gateway.HandedOver).
	gateway interface{ HandedOver() }
	// evals stops the eval runs under way, which the new process would
	// fail at its start while this one still ran them (evals.Runner).
	evals interface {
		HandOver()
		Continue()
	}
	log *slog.Logger
}

// run hands the socket to a new process. It returns the new process's pid
// once it serves; with an error, the new process is gone and this one
// serves on, its jobs carrying on here.
func (h handover) run(ctx context.Context) (int, error) {
	h.log.Info("handing the port to a new modelserve: starting the binary on disk")
	// The eval runs end here, saying the handover interrupted them: the
	// new process fails at its start any it finds running, and would fail
	// those this one still ran. Those an update's trial asks for end as its
	// job stops, below, and its eval step runs them again in the new
	// process.
	h.evals.HandOver()
	// The jobs stop between two steps, so that the new process carries
	// each on from the step after its last and none runs a step twice.
	pctx, cancel := context.WithTimeout(ctx, jobsBoundaryWithin)
	h.jobs.Pause(pctx)
	cancel()
	// The fleet's Run ends before the new process starts, when its
	// engines outlive it: the new process adopts them, loaded, rather than
	// load every model a second time beside them. This one's gateway
	// sends on to them from the fleet's last view meanwhile; a request
	// waiting here for a model not loaded waits for the new process, and
	// is told to send again once it serves (release).
	// Engines that stop with their fleet (--stop-engines-on-exit) run on
	// until this process exits, and the new one starts its own.
	adopting := h.fleet != nil && h.fleet.outlives()
	if adopting {
		h.fleet.stop()
		h.log.Info("the fleet stopped, its engines left running for the new modelserve to adopt")
	}
	pid, err := h.start(ctx)
	if err != nil {
		if adopting {
			h.fleet.start() // it takes its engines back, as the next process would have
		}
		h.evals.Continue()
		if cerr := h.jobs.Continue(context.WithoutCancel(ctx)); cerr != nil {
			h.log.Error("the jobs paused for the handover could not be carried on here; the next start resumes them", "err", cerr)
		}
		return 0, err
	}
	return pid, nil
}

// lingerAfterHandover is how long the old process answers on the
// connections it has, each answer closing its connection, before it closes
// those left idle: a client sending on a connection the server closes at
// that instant gets an error it cannot retry (a POST), while one told
// "Connection: close" with its answer dials again, and reaches the new
// process.
const lingerAfterHandover = 2 * time.Second

// release is the old process's part once the new one serves: it stops
// accepting (the new process takes the connections waiting on the socket),
// closes each connection after its next answer, tells the requests
// waiting for a replica that will not start here to send again (they
// reach the new process), ends the console's event streams so that their
// browsers reconnect to the new process, and gives the clients it holds
// idle connections of lingerAfterHandover to learn of it. Shutdown then
// finishes the requests in flight, and those waiting for a slot of a
// replica that is ready.
func (h handover) release(closing *atomic.Bool, streams chan struct{}) {
	closing.Store(true)
	if err := h.ln.Close(); err != nil {
		h.log.Warn("could not stop accepting; the new process and this one share the connections until this one exits", "err", err)
	}
	h.gateway.HandedOver()
	close(streams)
	time.Sleep(lingerAfterHandover)
}

// closeAfter asks, once closing is set, that each connection close after
// its answer.
func closeAfter(h http.Handler, closing *atomic.Bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if closing.Load() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// start starts the binary modelserve was started from with the same
// arguments, the socket and a ready pipe, and waits for it to say it
// serves.
func (h handover) start(ctx context.Context) (int, error) {
	// The path it was started from, looked up again: /proc/self/exe is
	// the old binary, deleted when a package replaced it.
	exe, err := exec.LookPath(os.Args[0])
	if err != nil {
		return 0, fmt.Errorf("cannot find the binary modelserve was started as (%s): %w", os.Args[0], err)
	}
	if exe, err = filepath.Abs(exe); err != nil {
		return 0, err
	}
	// The socket's own fd, passed as it is: os.File.Fd, which exec.Cmd's
	// ExtraFiles calls, would make the socket blocking for this process
	// too (the flag is the socket's, not the fd's), and its Accept would
	// then hang in the kernel where Shutdown cannot end it.
	sc, ok := h.ln.(syscall.Conn)
	if !ok {
		return 0, fmt.Errorf("the listener is a %T, which cannot be handed over", h.ln)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("cannot hand over the listening socket: %w", err)
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer readyR.Close()
	var pid int
	cerr := raw.Control(func(sock uintptr) {
		// Files[i] is fd i in the child: the socket is 3, the pipe 4.
		pid, err = syscall.ForkExec(exe, os.Args, &syscall.ProcAttr{
			Env:   append(childEnv(os.Environ()), listenFDEnv+"=3", readyFDEnv+"=4"),
			Files: []uintptr{os.Stdin.Fd(), os.Stdout.Fd(), os.Stderr.Fd(), sock, readyW.Fd()},
		})
	})
	readyW.Close() // the child's copy is the one that says ready
	if err = cmp.Or(cerr, err); err != nil {
		return 0, fmt.Errorf("cannot start %s: %w", exe, err)
	}
	proc, err := os.FindProcess(pid)
	if err != nil {
		return 0, err
	}
	exited := make(chan error, 1)
	go func() {
		st, err := proc.Wait()
		if err == nil {
			err = errors.New(st.String())
		}
		exited <- err
	}()
	said := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(readyR).ReadString('\n')
		said <- strings.TrimSpace(line)
	}()
	t := time.NewTimer(childReadyWithin)
	defer t.Stop()
	var why error
	select {
	case line := <-said:
		if line == "ready" {
			h.log.Info("the new modelserve serves; this one stops accepting and finishes what it answers", "pid", pid, "binary", exe)
			return pid, nil
		}
		// Most often it exited: say so, with how.
		select {
		case err := <-exited:
			return 0, fmt.Errorf("the new modelserve (%s) exited before it served (%v); its log says why", exe, err)
		case <-time.After(time.Second):
		}
		why = fmt.Errorf("the new modelserve (%s) closed its ready pipe without saying it was ready; its log says why", exe)
	case err := <-exited:
		return 0, fmt.Errorf("the new modelserve (%s) exited before it served (%v); its log says why", exe, err)
	case <-t.C:
		why = fmt.Errorf("the new modelserve (%s) did not say it was ready within %s", exe, childReadyWithin)
	case <-ctx.Done():
		why = errors.New("modelserve is stopping")
	}
	// Stopped before this process carries on with the jobs, so that no
	// job runs in both.
	proc.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(childStopWithin):
		proc.Kill()
		<-exited
	}
	return 0, why
}

// childEnv is the environment less what told this process about its own
// sockets: the child is told of its own.
func childEnv(env []string) []string {
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case listenFDEnv, readyFDEnv, "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// sayReady tells whoever waits that this process serves: the old
// process through the pipe it handed over, and systemd (Type=notify)
// that this process is now the service's main one.
func sayReady(log *slog.Logger) {
	if v := os.Getenv(readyFDEnv); v != "" {
		os.Unsetenv(readyFDEnv)
		if n, err := strconv.Atoi(v); err == nil && n > 2 {
			f := os.NewFile(uintptr(n), "ready")
			if _, err := io.WriteString(f, "ready\n"); err != nil {
				log.Warn("could not tell the previous modelserve this one is ready; it serves on until its bound", "err", err)
			}
			f.Close()
		}
	}
	sdNotify(fmt.Sprintf("READY=1\nMAINPID=%d", os.Getpid()))
}

// handedOver is whether this process was started by a handover.
func handedOver() bool { return os.Getenv(readyFDEnv) != "" }

// sdNotify sends state to systemd's notify socket, when there is one.
func sdNotify(state string) {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return
	}
	defer c.Close()
	c.Write([]byte(state))
}

// healthView is what a new process waits on before it says it is ready.
type healthView interface {
	ModelHealth() []fleet.ModelHealth
}

// awaitFleet waits, up to fleetReadyWithin, until every model the
// catalog asks replicas of has them ready, so that the requests the old
// process stops taking are answered here at once. It logs the models it
// stopped waiting for.
func awaitFleet(ctx context.Context, fl healthView, log *slog.Logger) {
	deadline := time.Now().Add(fleetReadyWithin)
	for {
		var waiting []string
		for _, m := range fl.ModelHealth() {
			if m.Want > 0 && m.Ready < m.Want && !m.Parked && !m.Unplaceable {
				waiting = append(waiting, m.Model)
			}
		}
		if len(waiting) == 0 {
			return
		}
		if time.Now().After(deadline) {
			log.Warn("taking over without every model's replicas ready: their requests wait here for them", "models", strings.Join(waiting, ", "), "waited", fleetReadyWithin)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// processStart is when process pid started, in the kernel's ticks since
// boot: with the pid, it names one process, where a pid alone may name
// another one later.
func processStart(pid int) (string, error) {
	f, err := procStat(pid)
	if err != nil {
		return "", err
	}
	return f[19], nil
}

// procStat is /proc/<pid>/stat's fields after the command's name (which
// may hold spaces): the state first, the start time 20th.
func procStat(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil, fmt.Errorf("unreadable /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return nil, fmt.Errorf("unreadable /proc/%d/stat", pid)
	}
	return f, nil
}

// writePIDFile records this process as the one serving data.
func writePIDFile(data string) error {
	start, _ := processStart(os.Getpid())
	tmp := filepath.Join(data, "."+pidFileName)
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d %s\n", os.Getpid(), start)), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(data, pidFileName))
}

// removePIDFile removes the pid file if it still names this process: after
// a handover it names the new one.
func removePIDFile(data string) {
	if pid, _, err := readPIDFile(data); err == nil && pid == os.Getpid() {
		os.Remove(filepath.Join(data, pidFileName))
	}
}

func readPIDFile(data string) (int, string, error) {
	b, err := os.ReadFile(filepath.Join(data, pidFileName))
	if err != nil {
		return 0, "", err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, "", fmt.Errorf("the pid file %s is empty", filepath.Join(data, pidFileName))
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return 0, "", fmt.Errorf("the pid file %s does not start with a pid", filepath.Join(data, pidFileName))
	}
	start := ""
	if len(f) > 1 {
		start = f[1]
	}
	return pid, start, nil
}

// running is the pid of the modelserve serving data, checked: the pid
// file names it with its start time, and a process by that pid that
// started at another time is not it.
func running(data string) (int, error) {
	pid, start, err := readPIDFile(data)
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("no modelserve serves %s: it has no %s (start one with modelserve serve --data %s)", data, pidFileName, data)
	}
	if err != nil {
		return 0, err
	}
	now, err := processStart(pid)
	if err != nil || (start != "" && now != start) {
		return 0, fmt.Errorf("no modelserve serves %s: its %s names pid %d, which has exited or is another process now", data, pidFileName, pid)
	}
	return pid, nil
}

// writeResult records how a handover ended, for --upgrade to print.
func writeResult(data, line string) {
	tmp := filepath.Join(data, "."+handoverResult)
	if os.WriteFile(tmp, []byte(line+"\n"), 0o600) == nil {
		os.Rename(tmp, filepath.Join(data, handoverResult))
	}
}

// upgradeRunning is `modelserve serve --upgrade`: it asks the modelserve
// serving data to hand its port to the binary on disk, and prints how
// that ended.
func upgradeRunning(ctx context.Context, data string, stdout io.Writer) error {
	pid, err := running(data)
	if err != nil {
		return err
	}
	result := filepath.Join(data, handoverResult)
	os.Remove(result)
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		return fmt.Errorf("cannot signal modelserve (pid %d): %w", pid, err)
	}
	fmt.Fprintf(stdout, "asked modelserve (pid %d) to hand its port to the binary on disk\n", pid)
	// The jobs' pause, the child's start and a margin to write it.
	ctx, cancel := context.WithTimeout(ctx, jobsBoundaryWithin+childReadyWithin+childStopWithin+10*time.Second)
	defer cancel()
	for {
		if b, err := os.ReadFile(result); err == nil {
			line := strings.TrimSpace(string(b))
			if strings.HasPrefix(line, "failed: ") {
				return errors.New(strings.TrimPrefix(line, "failed: "))
			}
			fmt.Fprintln(stdout, line)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("modelserve (pid %d) did not say how the handover ended; its log says", pid)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

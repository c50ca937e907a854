package gateway

import (
	"errors"
	"net"
	"syscall"
)

// idleProbe tells whether the engine closed a kept connection while it
// was idle: a peek that would otherwise wait finds the connection's end
// (or a reset) instead. llama-server closes a connection after a streamed
// answer without saying so; found before the request is written to it,
// the request is written once, to a new connection, and goes on in its
// turn (the turn ends with the write). It is made with its connection, so
// a probe allocates nothing.
type idleProbe struct {
	raw    syscall.RawConn
	peek   func(fd uintptr) bool
	b      [1]byte
	closed bool
}

func newIdleProbe(c net.Conn) *idleProbe {
	p := &idleProbe{}
	if sc, ok := c.(syscall.Conn); ok {
		p.raw, _ = sc.SyscallConn()
	}
	p.peek = func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), p.b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// Nothing to read yet is a live connection; anything read, the
		// end, or an error is one not to send on.
		p.closed = n > 0 || !errors.Is(err, syscall.EAGAIN)
		return true
	}
	return p
}

// closedWhileIdle is whether the connection is not to be sent on.
func (p *idleProbe) closedWhileIdle() bool {
	if p.raw == nil {
		return false
	}
	p.closed = false
	if err := p.raw.Read(p.peek); err != nil {
		return true
	}
	return p.closed
}

//go:build !linux

package gateway

import "net"

// idleProbe has a kept connection tried: one the engine closed fails
// before any byte of the answer, and the request is sent again on a new
// one (engineClient.do).
type idleProbe struct{}

func newIdleProbe(net.Conn) *idleProbe { return &idleProbe{} }

func (*idleProbe) closedWhileIdle() bool { return false }

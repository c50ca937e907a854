//go:build !linux

package fleet

import (
	"context"
	"errors"
	"time"
)

// Start is not implemented off Linux: stopping an engine with its children
// and measuring its memory are written against Linux's process groups and
// /proc.
func (n *LocalNode) Start(context.Context, Spec) (Process, error) {
	return nil, errors.New("the local node runs engines on Linux only")
}

// identity names a process beyond its pid; off Linux no process is
// identified, so none is adopted.
type identity struct {
	start uint64
	exe   string
	uid   int
}

func identify(int) (identity, bool)               { return identity{}, false }
func (identity) is(int) bool                      { return false }
func groupRSS(int) int64                          { return 0 }
func stopByIdentity(int, identity, time.Duration) {}
func adopt(context.Context, int, identity, string) Process {
	return nil
}

//go:build !linux

package fleet

import (
	"context"
	"errors"
)

// Start is not implemented off Linux: stopping an engine with its children
// and measuring its memory are written against Linux's process groups and
// /proc.
func (n *LocalNode) Start(context.Context, Spec) (Process, error) {
	return nil, errors.New("the local node runs engines on Linux only")
}

package mirror

import (
	"fmt"
	"syscall"
)

// freeSpace is what statfs(2) says an unprivileged process may still write
// in dir: the blocks reserved for root are no use to the mirror.
func freeSpace(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("cannot read the free space of %s: %w", dir, err)
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}

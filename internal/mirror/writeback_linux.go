package mirror

import (
	"os"
	"syscall"
)

// startWriteback asks the kernel to begin writing a range of the file to
// disk without waiting for it (sync_file_range with SYNC_FILE_RANGE_WRITE).
// Only a hint, so errors are ignored: the fsync before the rename is what
// makes the file durable.
func startWriteback(f *os.File, off, n int64) {
	const syncFileRangeWrite = 2
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		syscall.Syscall6(syscall.SYS_SYNC_FILE_RANGE, fd, uintptr(off), uintptr(n), syncFileRangeWrite, 0, 0)
	})
}

package store

import (
	"errors"
	"syscall"

	"github.com/mattn/go-sqlite3"
)

// Full is whether err is SQLite failing because the disk under the
// database is full. Such a failure is the operator's to fix (free some
// space), and is said so; any other database failure is the program's.
func Full(err error) bool {
	var e sqlite3.Error
	if errors.As(err, &e) {
		return e.Code == sqlite3.ErrFull || e.SystemErrno == syscall.ENOSPC
	}
	return errors.Is(err, syscall.ENOSPC)
}

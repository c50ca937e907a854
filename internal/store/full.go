package store

import (
	"errors"
	"syscall"

	"github.com/mattn/go-sqlite3"

	"modelserve/internal/operr"
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

// FullError is err, or, when err is the database failing on a full disk,
// the operator's sentence for it: what could not be done ("the eval suite
// of \"tiny\" could not be kept"), and what frees the disk. An operator's
// error already (the mirror's own "disk is full") is kept as it is. It is
// the one way every part says a full disk.
func FullError(err error, what string) error {
	if err == nil {
		return nil
	}
	if _, said := operr.As(err); said || !Full(err) {
		return err
	}
	return operr.Wrap(operr.Unavailable, err, "%s: modelserve's disk is full; free some space in its data folder "+
		"(the mirror page removes files), then try again", what)
}

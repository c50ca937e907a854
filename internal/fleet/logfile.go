package fleet

import (
	"io"
	"os"
	"time"
)

// An engine that outlives modelserve writes to a file (Spec.LogFile),
// which modelserve reads as it grows into the replica's log and the
// listeners of its output, as it read the pipe before.
const (
	// maxLogFile is the most an engine's log file holds: past it, the
	// file is emptied once read (the engine appends, so it writes on
	// from its start), and the replica's last lines are in memory.
	maxLogFile = 8 << 20
	// logReadFast is the wait between reads of a file that just grew:
	// the line saying an engine is ready is read within it. Each read of
	// nothing doubles the wait, up to logReadSlow.
	logReadFast = 2 * time.Millisecond
	logReadSlow = 100 * time.Millisecond
	// logBacklog is how much of an adopted engine's file is read for the
	// lines it wrote before.
	logBacklog = 64 << 10
)

// logFollower copies what an engine writes to its file to w.
type logFollower struct {
	quit, done chan struct{}
}

// followLog copies path, from its offset from (from its end less -from
// when negative), to w, until stop.
func followLog(path string, from int64, w io.Writer) (*logFollower, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	if from < 0 {
		if st, err := f.Stat(); err == nil {
			from = max(0, st.Size()+from)
		} else {
			from = 0
		}
	}
	l := &logFollower{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		defer f.Close()
		buf := make([]byte, 64<<10)
		off, wait := from, logReadFast
		read := func() bool {
			if st, err := f.Stat(); err == nil && st.Size() < off {
				off = 0 // emptied by someone else: read it from its start
			}
			got := false
			for {
				n, err := f.ReadAt(buf, off)
				if n > 0 {
					_, _ = w.Write(buf[:n])
					off += int64(n)
					got = true
				}
				if err != nil || n < len(buf) {
					break
				}
			}
			if off > maxLogFile {
				// What is written between the read and here is lost:
				// a few lines, once every few megabytes.
				if f.Truncate(0) == nil {
					off = 0
				}
			}
			return got
		}
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-l.quit:
				read() // what it wrote last, its reason for ending
				return
			case <-t.C:
			}
			if read() {
				wait = logReadFast
			} else {
				wait = min(2*wait, logReadSlow)
			}
			t.Reset(wait)
		}
	}()
	return l, nil
}

// stop reads what is left and stops following.
func (l *logFollower) stop() {
	select {
	case <-l.quit:
	default:
		close(l.quit)
	}
	<-l.done
}

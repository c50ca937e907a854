package fleet

import (
	"bytes"
	"strings"
	"sync"
)

// logLines is how many of an engine's last lines a replica keeps: enough
// for a load failure and what led to it, little enough to hold for every
// replica.
const logLines = 200

// maxLineBytes cuts a runaway line (a dumped prompt, a progress bar
// without newlines) so one line cannot hold the memory of a log.
const maxLineBytes = 4096

// logTail keeps the last lines written to it, in a ring.
type logTail struct {
	mu      sync.Mutex
	lines   []string
	next    int // where the next line goes, once the ring is full
	partial []byte
}

func newLogTail() *logTail { return &logTail{lines: make([]string, 0, logLines)} }

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.partial = append(l.partial, p[:min(len(p), max(0, maxLineBytes-len(l.partial)))]...)
			break
		}
		l.partial = append(l.partial, p[:min(i, max(0, maxLineBytes-len(l.partial)))]...)
		l.add(string(l.partial))
		l.partial = l.partial[:0]
		p = p[i+1:]
	}
	return n, nil
}

// Note adds a line of modelserve's own, such as where a restart began.
func (l *logTail) Note(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.add(line)
}

func (l *logTail) add(line string) {
	line = strings.TrimRight(line, "\r")
	if len(l.lines) < logLines {
		l.lines = append(l.lines, line)
		return
	}
	l.lines[l.next] = line
	l.next = (l.next + 1) % logLines
}

// Lines are the kept lines, oldest first, with an unfinished last line.
func (l *logTail) Lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.lines)+1)
	out = append(out, l.lines[l.next:]...)
	out = append(out, l.lines[:l.next]...)
	if len(l.partial) > 0 {
		out = append(out, string(l.partial))
	}
	return out
}

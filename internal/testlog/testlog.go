// Package testlog is the log buffer tests share: a server's or a process's
// output, written by several goroutines while the test reads it. Five
// test packages each kept their own copy of it.
package testlog

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent writers and readers.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// WriteString writes s, as io.StringWriter.
func (b *Buffer) WriteString(s string) (int, error) { return b.Write([]byte(s)) }

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Reset forgets what was written.
func (b *Buffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Reset()
}

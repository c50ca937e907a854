package fleet

import (
	"bytes"
	"sync"
)

// listeningLine is what llama-server writes once its model is loaded and
// it takes requests ("llama_server: listening on http://…"; older builds
// "main: server is listening on http://…"): the moment it is ready, as
// its /health would say, with no poll's time nor a round trip to /health
// left to each cold start.
var listeningLine = []byte("listening on http")

// listening is told an engine's output, and closes heard once
// listeningLine passes in it, wherever the writes cut it.
type listening struct {
	mu    sync.Mutex
	tail  []byte // the last bytes written, too few to hold the line
	done  bool
	heard chan struct{}
}

func newListening() *listening { return &listening{heard: make(chan struct{})} }

func (l *listening) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return len(p), nil
	}
	joined := append(l.tail, p...)
	if bytes.Contains(joined, listeningLine) {
		l.done, l.tail = true, nil
		close(l.heard)
		return len(p), nil
	}
	l.tail = bytes.Clone(joined[len(joined)-min(len(joined), len(listeningLine)-1):])
	return len(p), nil
}

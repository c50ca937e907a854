package fleet

import "sync"

// Listeners are the functions to tell of something, each told the
// thing's value: added at any time, and called outside the lock that
// guards them, so that one may itself ask the fleet. The zero value has
// none.
type Listeners[T any] struct {
	mu  sync.Mutex
	fns []func(T)
}

// Add has fn told from now on.
func (l *Listeners[T]) Add(fn func(T)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fns = append(l.fns, fn)
}

// Tell calls each function with v, in the order they were added.
func (l *Listeners[T]) Tell(v T) {
	l.mu.Lock()
	// Functions are only ever appended: the list as it is now stays as
	// it is, whatever is added while it is told.
	fns := l.fns[:len(l.fns):len(l.fns)]
	l.mu.Unlock()
	for _, fn := range fns {
		fn(v)
	}
}

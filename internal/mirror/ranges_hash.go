package mirror

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// A ranged fetch hashes the contiguous prefix of the file as it grows. The
// connection writing at the prefix's edge hands each buffer it wrote to the
// hasher rather than a copy of it, and takes a fresh one, so on a fast link
// the bytes are hashed from memory as they arrive, as a single stream's
// are; what other connections wrote ahead of the edge is read back from the
// page cache once the edge reaches it. At most hashDepth buffers wait for
// the hasher: a connection that finds them all waiting keeps its buffer,
// and the hasher reads those bytes back instead.

// chunk is bytes [off, off+len(b)) of the file, written, for the hasher;
// bp is the buffer b is in, back to the pool once hashed.
type chunk struct {
	off int64
	b   []byte
	bp  *[]byte
}

// handLocked gives the hasher bytes [at, at+n) that a connection has just
// written from *bp, when they are the next it is to hash and it has room;
// r.mu is held. True means *bp is the hasher's now.
func (r *ranged) handLocked(at int64, bp *[]byte, n int) bool {
	if at != r.queued {
		return false
	}
	select {
	case r.chunks <- chunk{off: at, b: (*bp)[:n], bp: bp}:
		r.queued = at + int64(n)
		return true
	default:
		return false
	}
}

// hashFollowing hashes the prefix as it grows, until grew is closed and
// the whole file is hashed. Chunks come in the order of the file (they are
// handed under r.mu, each starting where the last ended); bytes past the
// last one handed are read back.
func (r *ranged) hashFollowing(ctx context.Context, file *os.File, grew <-chan struct{}) error {
	var back *[]byte
	defer func() {
		if back != nil {
			bufPool.Put(back)
		}
	}()
	last := false
	for {
		if ctx.Err() != nil && !last {
			return ctx.Err()
		}
		// Claim what is written past the chunks handed: those are
		// read back, after the chunks before them.
		r.mu.Lock()
		handed, prefix := r.queued, r.prefixLocked()
		r.queued = max(r.queued, prefix)
		r.mu.Unlock()
		for r.hashed < handed {
			select {
			case c := <-r.chunks:
				r.hashChunk(c)
			case <-ctx.Done():
				if !last {
					return ctx.Err()
				}
			}
		}
		if r.hashed < prefix {
			if back == nil {
				back = bufPool.Get().(*[]byte)
			}
			if err := r.readBack(ctx, file, *back, prefix, last); err != nil {
				return err
			}
		}
		if last {
			if r.hashed != r.size {
				return retry(fmt.Errorf("the parts of %s left a gap at byte %d", r.d.name, r.hashed))
			}
			return nil
		}
		select {
		case c := <-r.chunks:
			r.hashChunk(c)
		case _, ok := <-grew:
			last = !ok
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// hashChunk hashes a chunk handed over and gives its buffer back.
func (r *ranged) hashChunk(c chunk) {
	if c.off != r.hashed {
		// Cannot be: chunks are handed in order. A hash that skipped
		// or repeated bytes would be found only at the end, as a
		// mismatch blamed on the registry.
		panic(fmt.Sprintf("mirror: a chunk at %d handed to a hash at %d", c.off, r.hashed))
	}
	r.hmu.Lock()
	r.d.h.Write(c.b)
	r.mu.Lock()
	r.hashed += int64(len(c.b))
	r.mu.Unlock()
	r.hmu.Unlock()
	bufPool.Put(c.bp)
}

// readBack hashes the written bytes [r.hashed, to) from the file.
func (r *ranged) readBack(ctx context.Context, file *os.File, buf []byte, to int64, last bool) error {
	for r.hashed < to {
		if ctx.Err() != nil && !last {
			return ctx.Err()
		}
		k, err := file.ReadAt(buf[:min(int64(len(buf)), to-r.hashed)], r.hashed)
		r.hmu.Lock()
		r.d.h.Write(buf[:k])
		r.mu.Lock()
		r.hashed += int64(k)
		r.mu.Unlock()
		r.hmu.Unlock()
		if err != nil && !(errors.Is(err, io.EOF) && r.hashed == to) {
			return fmt.Errorf("cannot read the partial %s on the mirror: %w", r.d.name, err)
		}
	}
	return nil
}

// dropChunks gives back the buffers of chunks a try that ended left
// unhashed.
func (r *ranged) dropChunks() {
	for {
		select {
		case c := <-r.chunks:
			bufPool.Put(c.bp)
		default:
			return
		}
	}
}

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
// the hasher: the connection at the edge that finds them all waiting waits
// for room (hand), as a single stream waits for its hasher; one whose
// buffer the hasher has since passed keeps it, and the hasher reads those
// bytes back instead.

// chunk is bytes [off, off+len(b)) of the file, written, for the hasher;
// bp is the buffer b is in, back to the pool once hashed.
type chunk struct {
	off int64
	b   []byte
	bp  *[]byte
}

// handLocked gives the hasher what it is still to be handed of bytes
// [at, at+n), which a connection has just written from *bp: those from
// queued on, when queued lies among them (the hasher may have claimed the
// first of them, to read back) and it has room; r.mu is held. True means
// *bp is the hasher's now.
func (r *ranged) handLocked(at int64, bp *[]byte, n int) bool {
	if !r.edgeLocked(at, n) || r.queued == at+int64(n) {
		return false
	}
	select {
	case r.chunks <- chunk{off: r.queued, b: (*bp)[r.queued-at : n], bp: bp}:
		r.queued = at + int64(n)
		return true
	default:
		return false
	}
}

// hand gives the hasher a buffer of c's that reaches its edge, waiting for
// room while hashDepth buffers wait before it, as a single stream waits
// for its hasher: bytes handed are hashed from memory, where bytes left
// behind would be read back from the file, a second copy of each. It
// gives up when the part is no longer c's, the hasher claimed the bytes,
// or ctx ends. True means *bp is the hasher's now.
func (r *ranged) hand(ctx context.Context, c *conn, p *part, gen int, at int64, bp *[]byte, n int) bool {
	for {
		r.mu.Lock()
		if p.gen != gen || p.conn != c || !r.edgeLocked(at, n) || r.queued == at+int64(n) {
			r.mu.Unlock()
			return false
		}
		handed := r.handLocked(at, bp, n)
		r.mu.Unlock()
		if handed {
			return true
		}
		select {
		case <-r.room:
		case <-ctx.Done():
			return false
		}
	}
}

// edgeLocked says whether bytes [at, at+n) of a buffer reach the hash's
// edge: queued lies among them or just past them, so the hasher's next
// bytes are in the buffer, or are the next to be written to it.
func (r *ranged) edgeLocked(at int64, n int) bool {
	return at <= r.queued && r.queued <= at+int64(n)
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
		// read back, after the chunks before them. Bytes a connection
		// is still gathering at the edge are not: they come as a chunk.
		r.mu.Lock()
		handed, prefix := r.queued, r.prefixLocked()
		if r.filling != nil && !last {
			prefix = handed
		}
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
	select {
	case r.room <- struct{}{}:
	default:
	}
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
		r.readBackBytes += int64(k)
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

package mirror

import (
	"context"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"modelserve/internal/hf"
	"modelserve/internal/operr"
)

// A large file comes over several connections at once: the Hub's CDN serves
// each connection at a limited rate, so one stream is the slowest way to
// fetch a 40 GB file. But more is not better: a CDN throttles a client that
// holds too many, every connection at once (huggingface_hub #4893: 64
// connections fell from 2.3 GB/s to under 1 MB/s, where a fixed 4 held 300
// MB/s). So the count is found as the file arrives: start small, add a
// connection while the total rate rises with it, take connections away when
// it stops rising or the rates collapse, never above Options.Connections.
//
// The file is cut into parts written in place in the partial file. The
// sha256 follows the contiguous prefix as it grows (ranges_hash.go): the
// bytes at its edge are hashed from the buffer they arrived in, the others
// read back from the page cache as soon as the prefix reaches them, so once
// the last part lands only the tail is left to hash and nothing is read
// twice from the disk. On a link one connection fills, the fetch stays on
// one, and that one works as a single stream: it asks for the rest of the
// file at once and hashes every byte from the buffer it arrived in,
// waiting for the hasher as a single stream does. The parts, and the
// hash's state, are saved beside the file (the parts file, temp + rename,
// only after the bytes it counts are synced), so a restart fetches only
// what is missing and hashes nothing again.

// partsSuffix names the saved state of a ranged fetch: .<name>.parts.
const partsSuffix = ".parts"

func partsPath(local string) string {
	return filepath.Join(filepath.Dir(local), "."+filepath.Base(local)+partsSuffix)
}

// checkpointEvery is the longest a ranged fetch runs between two saves of
// its parts: what a crash may cost to fetch again.
const checkpointEvery = 2 * time.Second

// errNoRanges ends a ranged try whose registry sent the whole file to a
// request for part of it: the fetch carries on in one stream.
var errNoRanges = errors.New("the registry does not serve Range")

// part is a range of the file: [start, end) is its share, [start, next)
// is written. A part taken from its connection (too slow, stalled) gets a
// new gen, so the old connection's bytes no longer count. A part whose
// request failed (a cut, a busy registry) waits until notBefore, alone:
// the other parts go on.
type part struct {
	start, end, next int64
	gen              int
	busy             bool
	conn             *conn
	fails            int // failed requests in a row
	notBefore        time.Time
}

// conn is one connection fetching a part, as the controller measures it.
type conn struct {
	cancel  func(cause error) // ends the part being fetched; nil between parts
	born    time.Time
	window  atomic.Int64 // bytes since the controller last looked
	last    int64        // bytes of the window before
	slow    int          // windows in a row far slower than the fastest
	windows int          // windows the connection has been measured in
	leaving bool         // the controller wants one connection fewer
}

// ranged is one file's parts across the tries of a fetch.
type ranged struct {
	d      *download
	size   int64
	minCut int64 // the smallest part a split leaves

	mu      sync.Mutex
	parts   []*part // sorted by start, tiling [0, size)
	conns   map[*conn]bool
	want    int           // connections the controller wants running
	refetx  int           // parts taken from a connection in this try
	fastest int64         // the most bytes one connection fetched in a recent window
	looked  time.Time     // when the controller last measured the connections (the try's own)
	exited  chan struct{} // a connection ended, or the first answered
	probed  bool          // a part was answered with its range

	hmu    sync.Mutex // held while the hash is written or saved
	hashed int64      // guarded by hmu and mu both: the hash covers [0, hashed)
	// readBackBytes is guarded by hmu: the bytes hashed from the file rather
	// than from the buffer they arrived in, each a second copy.
	readBackBytes int64
	// queued is guarded by mu: [0, queued) is hashed or handed to the
	// hasher in chunks (in order, never more than hashDepth at once).
	queued int64
	// filling is guarded by mu: the connection whose buffer starts at
	// queued and is not yet full. Its bytes are the hasher's to wait
	// for, not to claim and read back: on a link one connection fills,
	// every byte is hashed from the buffer it arrived in.
	filling *conn
	chunks  chan chunk
	room    chan struct{} // the hasher took a chunk
}

// rangedFor says whether the file is fetched in parts: over http(s), from a
// registry that serves Range, and large enough to be worth it.
func (m *Mirror) rangedFor(f File) bool {
	return m.opts.Connections > 1 && f.Size >= 2*m.opts.PartSize &&
		(len(f.URL) > 5 && (f.URL[:5] == "http:" || f.URL[:6] == "https:"))
}

// newRanged sets up the parts: from the saved state when it is this file's
// and readable, else from what a single stream left (a prefix of the file),
// else from nothing. It hashes at most what a single stream left, once.
func (d *download) newRanged(ctx context.Context, file *os.File) (*ranged, error) {
	f := d.fl.file
	r := &ranged{d: d, size: f.Size, minCut: max(d.m.opts.PartSize/8, 16<<10), conns: map[*conn]bool{}}
	st, err := file.Stat()
	if err != nil {
		return nil, fmt.Errorf("cannot read %s on the mirror: %w", d.name, err)
	}
	if r.load(st.Size()) {
		d.fl.bytes.Store(r.doneLocked())
		return r, nil
	}
	if _, err := os.Stat(partsPath(d.fl.local)); err == nil {
		// Parts of another file, or unreadable: what the partial file
		// holds is unknown, so nothing of it is kept.
		if err := d.restart(file); err != nil {
			return nil, err
		}
	}
	// No state of ours: the partial file is a single stream's prefix (or
	// nothing), as download.resume reads it.
	have, err := d.resume(ctx, file)
	if err != nil {
		return nil, err
	}
	for off := int64(0); off < f.Size; off += d.m.opts.PartSize {
		p := &part{start: off, end: min(off+d.m.opts.PartSize, f.Size)}
		p.next = min(max(have, p.start), p.end)
		r.parts = append(r.parts, p)
	}
	r.hashed = have
	// The state goes down before any byte past the prefix does: a partial
	// file without one is always a prefix.
	if err := r.save(file); err != nil {
		return nil, err
	}
	return r, nil
}

// savedParts is the parts file, as JSON.
type savedParts struct {
	Size   int64      `json:"size"`
	SHA256 string     `json:"sha256"`
	Parts  [][3]int64 `json:"parts"` // start, end, next
	Hashed int64      `json:"hashed"`
	Hash   []byte     `json:"hash"` // the sha256's state over [0, hashed)
}

// load reads the saved parts, refusing any that are not exactly this file's
// (another size or sha256, parts that do not tile it, a hash state past
// what is written, a partial file shorter than what is written).
func (r *ranged) load(onDisk int64) bool {
	b, err := os.ReadFile(partsPath(r.d.fl.local))
	if err != nil || len(b) > 64<<20 {
		return false
	}
	var s savedParts
	if json.Unmarshal(b, &s) != nil || s.Size != r.size || s.SHA256 != r.d.fl.file.SHA256 ||
		len(s.Parts) == 0 || len(s.Parts) > 1<<20 {
		return false
	}
	var parts []*part
	at, written := int64(0), int64(0)
	for _, p := range s.Parts {
		if p[0] != at || p[1] <= p[0] || p[2] < p[0] || p[2] > p[1] {
			return false
		}
		parts = append(parts, &part{start: p[0], end: p[1], next: p[2]})
		at = p[1]
		if p[2] > p[0] {
			written = max(written, p[2])
		}
	}
	if at != r.size || written > onDisk {
		return false
	}
	r.parts = parts
	if s.Hashed < 0 || s.Hashed > r.prefixLocked() {
		return false
	}
	h := r.d.h
	h.Reset()
	if u, ok := h.(encoding.BinaryUnmarshaler); !ok || u.UnmarshalBinary(s.Hash) != nil {
		h.Reset()
		return false
	}
	r.hashed = s.Hashed
	r.d.hashed = -1 // the single stream's resume must not trust the hash
	return true
}

// save syncs the partial file and then records the parts: a part counts
// only bytes on the disk. Temp + rename, so a crash leaves the old state or
// the new, never half of one.
func (r *ranged) save(file *os.File) error {
	r.hmu.Lock()
	r.mu.Lock()
	s := savedParts{Size: r.size, SHA256: r.d.fl.file.SHA256, Hashed: r.hashed}
	for _, p := range r.parts {
		s.Parts = append(s.Parts, [3]int64{p.start, p.end, p.next})
	}
	r.mu.Unlock()
	s.Hash, _ = r.d.h.(encoding.BinaryMarshaler).MarshalBinary()
	r.hmu.Unlock()
	if err := file.Sync(); err != nil {
		return writeErr("cannot write %s", r.d.name, err)
	}
	b, _ := json.Marshal(s)
	side := partsPath(r.d.fl.local)
	tmp := side + tmpSuffix
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return writeErr("cannot write %s", r.d.name, err)
	}
	if err := syncFile(tmp); err != nil {
		os.Remove(tmp)
		return writeErr("cannot write %s", r.d.name, err)
	}
	if err := os.Rename(tmp, side); err != nil {
		os.Remove(tmp)
		return writeErr("cannot write %s", r.d.name, err)
	}
	return nil
}

// prefixLocked is where the contiguous written prefix of the file ends.
func (r *ranged) prefixLocked() int64 {
	for _, p := range r.parts {
		if p.next < p.end {
			return p.next
		}
	}
	return r.size
}

func (r *ranged) doneLocked() int64 {
	var n int64
	for _, p := range r.parts {
		n += p.next - p.start
	}
	return n
}

// try fetches the parts still missing over several connections. nil means
// every part is written and hashed; errNoRanges that the registry sends
// whole files only.
func (r *ranged) try(ctx context.Context, file *os.File) error {
	tctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	grew := make(chan struct{}, 1)
	errs := make(chan error, 1)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
		cancel(err)
	}

	// The hasher follows the prefix: the bytes at its edge as they
	// arrive, the rest read back while still in the page cache.
	r.mu.Lock()
	r.queued, r.filling = r.hashed, nil
	r.chunks = make(chan chunk, hashDepth)
	r.room = make(chan struct{}, 1)
	r.mu.Unlock()
	hashed := make(chan error, 1)
	go func() {
		err := r.hashFollowing(tctx, file, grew)
		if err != nil && tctx.Err() == nil {
			fail(err) // a connection may be waiting for it
		}
		hashed <- err
	}()

	r.mu.Lock()
	r.refetx, r.fastest = 0, 0
	r.want = r.d.m.startConnections()
	r.exited = make(chan struct{}, 1)
	r.mu.Unlock()
	spawn := func() {
		for {
			r.mu.Lock()
			if r.liveLocked() >= r.want || !r.readyLocked(time.Now()) || (!r.probed && len(r.conns) > 0) {
				r.mu.Unlock()
				return
			}
			c := &conn{born: time.Now()}
			r.conns[c] = true
			r.d.fl.conns.Store(int32(len(r.conns)))
			r.mu.Unlock()
			if pm, ok := r.d.m.opts.Metrics.(partMetrics); ok {
				pm.MirrorConnections(1)
			}
			wg.Go(func() {
				if err := r.work(tctx, file, c, grew); err != nil {
					fail(err)
				}
			})
		}
	}
	spawn()
	ctl := newController(r.d.m.opts, r.d.m.opts.Connections)
	tick := time.NewTicker(r.d.m.opts.RateWindow / 4)
	defer tick.Stop()
	r.looked = time.Now()
	saved := time.Now()
	var err error
	for err == nil {
		r.mu.Lock()
		finished := !r.workLeftLocked() && len(r.conns) == 0
		r.mu.Unlock()
		if finished {
			break
		}
		select {
		case <-tctx.Done():
			err = context.Cause(tctx)
		case <-r.exited:
			spawn() // a connection that ended may leave work for another
		case <-tick.C:
			r.control(ctl)
			spawn()
			if time.Since(saved) >= checkpointEvery {
				saved = time.Now()
				if serr := r.save(file); serr != nil {
					fail(serr)
				}
			}
		}
	}
	if err != nil {
		cancel(err)
	}
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	if err == nil {
		// Every part is written: the hasher reads the rest and ends.
		close(grew)
		err = <-hashed
	} else {
		cancel(err)
		<-hashed
	}
	r.dropChunks()
	r.d.fl.conns.Store(0)
	if err == nil {
		r.d.hashed = r.size
		return nil
	}
	// What arrived stays for the next try or the next start.
	if serr := r.save(file); serr != nil {
		r.d.m.log.Warn("mirror cannot save the parts of a fetch", "path", r.d.fl.file.Path, "err", serr)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// liveLocked is how many connections run and are not leaving.
func (r *ranged) liveLocked() int {
	n := 0
	for c := range r.conns {
		if !c.leaving {
			n++
		}
	}
	return n
}

// workLeftLocked says whether a part is still to be written.
func (r *ranged) workLeftLocked() bool {
	for _, p := range r.parts {
		if p.next < p.end {
			return true
		}
	}
	return false
}

// readyLocked says whether a connection started now would find a part to
// take: one nobody fetches and not waiting after a failure, or one to split.
func (r *ranged) readyLocked(now time.Time) bool {
	return r.freeLocked(now) != nil || r.biggestLocked() != nil
}

// freeLocked is the first part nobody fetches that may be asked for now.
func (r *ranged) freeLocked(now time.Time) *part {
	for _, p := range r.parts {
		if !p.busy && p.next < p.end && !now.Before(p.notBefore) {
			return p
		}
	}
	return nil
}

// biggestLocked is the busy part with the most left, if it is worth a split.
func (r *ranged) biggestLocked() *part {
	var big *part
	for _, p := range r.parts {
		if p.busy && p.end-p.next >= 2*r.minCut && (big == nil || p.end-p.next > big.end-big.next) {
			big = p
		}
	}
	return big
}

// take gives a connection a part: the first nobody fetches, else the
// second half of the busy part with the most left (a split), else nothing.
func (r *ranged) take(c *conn) (*part, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.freeLocked(time.Now()); p != nil {
		if r.want == 1 {
			r.joinLocked(p)
		}
		p.busy, p.conn = true, c
		return p, p.gen
	}
	big := r.biggestLocked()
	if big == nil {
		return nil, 0
	}
	mid := big.next + (big.end-big.next)/2
	np := &part{start: mid, end: big.end, next: mid, busy: true, conn: c}
	big.end = mid
	i := slices.Index(r.parts, big)
	r.parts = slices.Insert(r.parts, i+1, np)
	return np, 0
}

// joinLocked gives p the parts after it that nobody has begun, so that a
// lone connection fetches the rest of the file in one request, as a single
// stream does, rather than ask again at every part's end (a round trip, and
// a pause in the bytes, each time). A connection added later splits it.
func (r *ranged) joinLocked(p *part) {
	i := slices.Index(r.parts, p)
	j := i + 1
	for j < len(r.parts) && !r.parts[j].busy && r.parts[j].next == r.parts[j].start && r.parts[j].fails == 0 {
		j++
	}
	if j > i+1 {
		p.end = r.parts[j-1].end
		r.parts = slices.Delete(r.parts, i+1, j)
	}
}

// work fetches parts over one connection until none is left, the
// controller wants fewer connections, or the try ends. A connection that
// stalls, or that the controller takes its part from, leaves the part for
// another; any other failure ends the try.
func (r *ranged) work(ctx context.Context, file *os.File, c *conn, grew chan<- struct{}) error {
	defer func() {
		r.mu.Lock()
		delete(r.conns, c)
		r.d.fl.conns.Store(int32(len(r.conns)))
		r.mu.Unlock()
		if pm, ok := r.d.m.opts.Metrics.(partMetrics); ok {
			pm.MirrorConnections(-1)
		}
		select {
		case r.exited <- struct{}{}:
		default:
		}
	}()
	for ctx.Err() == nil {
		r.mu.Lock()
		leaving := c.leaving
		r.mu.Unlock()
		if leaving {
			return nil
		}
		p, gen := r.take(c)
		if p == nil {
			return nil
		}
		err := r.fetchPart(ctx, file, c, p, gen, grew)
		end := endOf(ctx, err)
		r.mu.Lock()
		// A cut part's wait is set as it is let go, not after: a
		// connection looking for work in between took it up at once,
		// with no wait at all.
		retries := end != partCut || r.failedLocked(p)
		if p.gen == gen && p.conn == c {
			p.busy, p.conn = false, nil
		}
		if err == nil {
			p.fails = 0
		}
		r.mu.Unlock()
		switch end {
		case partDone:
		case partMoved:
			if !r.refetched() {
				return retry(fmt.Errorf("parts of %s kept stalling", r.d.name))
			}
		case partStopped:
			return nil
		case partCut:
			// This part waits and is asked for again; the others go
			// on. Too many in a row fail the try, and the fetch's own
			// retries take over.
			if m, ok := r.d.m.opts.Metrics.(partMetrics); ok {
				m.MirrorPartRefetched()
			}
			if !retries {
				return err
			}
		default:
			return err
		}
	}
	return nil
}

// partEnd is how a connection's fetch of a part ended, as work treats it.
type partEnd int

const (
	partDone    partEnd = iota // fetched, or shed by the controller
	partMoved                  // taken for another connection, or stalled
	partStopped                // the fetch was cancelled
	partCut                    // a cut or a busy registry: asked for again after a wait
	partFailed                 // anything else ends the try
)

// endOf is how a part's fetch that returned err ended, in ctx.
func endOf(ctx context.Context, err error) partEnd {
	var rt *retryable
	switch {
	case err == nil, errors.Is(err, errShed):
		return partDone
	case errors.Is(err, errTaken), errors.Is(err, errStalled):
		return partMoved
	case ctx.Err() != nil:
		return partStopped
	case errors.As(err, &rt):
		return partCut
	}
	return partFailed
}

// finishedPart lets a connection that finished its part set the pace the
// others are measured by: a part on loopback may finish within a window.
func (r *ranged) finishedPart(n int64, took time.Duration) {
	if took <= 0 {
		return
	}
	perWindow := int64(float64(n) / took.Seconds() * r.d.m.opts.RateWindow.Seconds())
	r.mu.Lock()
	r.fastest = max(r.fastest, perWindow)
	r.mu.Unlock()
}

// failedLocked counts a failed request for p and sets when it may be
// asked for again, as fetchFile spaces its tries; false when p has failed
// more often in a row than the fetch may retry.
func (r *ranged) failedLocked(p *part) bool {
	p.fails++
	if p.fails > r.d.m.opts.MaxRetries {
		return false
	}
	p.notBefore = time.Now().Add(backoff(r.d.m.opts.Backoff, p.fails))
	return true
}

// readSize is the most one read of a part asks for: small enough that the
// bytes are still in the core's cache as they are written to the file.
const readSize = 128 << 10

// errTaken ends a connection whose part the controller gave to another.
var errTaken = errors.New("the part was taken from its connection")

// refetched counts a part fetched again, and says whether the try may go
// on: a registry that stalls every connection is a failed try, not a loop.
func (r *ranged) refetched() bool {
	if m, ok := r.d.m.opts.Metrics.(partMetrics); ok {
		m.MirrorPartRefetched()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refetx++
	return r.refetx <= 4*r.d.m.opts.Connections+len(r.parts)
}

// fetchPart reads one part's missing bytes into place.
func (r *ranged) fetchPart(ctx context.Context, file *os.File, c *conn, p *part, gen int, grew chan<- struct{}) error {
	m := r.d.m
	r.mu.Lock()
	from, to := p.next, p.end
	r.mu.Unlock()
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.mu.Lock()
	if p.gen != gen || c.leaving {
		r.mu.Unlock()
		return errShed
	}
	c.cancel = cancel
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		c.cancel = nil
		r.mu.Unlock()
	}()
	watchdog := time.AfterFunc(m.opts.StallTimeout, func() { cancel(errStalled) })
	defer watchdog.Stop()

	body, err := m.opts.Registry.Open(cctx, r.d.fl.file.URL, from, to-from)
	if err != nil {
		if cause := context.Cause(cctx); cause != nil && ctx.Err() == nil {
			return cause
		}
		if errors.Is(err, hf.ErrNoRanges) {
			return errNoRanges
		}
		return r.d.refusedPart(ctx, err)
	}
	defer body.Close()
	if body.Offset != from {
		return errNoRanges
	}
	r.mu.Lock()
	if !r.probed {
		// The registry serves Range: the other connections may start.
		r.probed = true
		select {
		case r.exited <- struct{}{}:
		default:
		}
	}
	r.mu.Unlock()
	if body.Size >= 0 && body.Size != r.size {
		return sizeMismatch(r.d.name, body.Size, r.size)
	}
	// The buffer fills a read at a time, each written while it is still
	// in the core's cache, and goes to the hasher whole.
	bp := bufPool.Get().(*[]byte)
	off := from
	kicked := from // bytes already handed to the disk's writeback
	bufAt, filled := from, 0
	defer func() {
		// The part ended, was split at this very byte or taken, or the
		// read failed: the bytes in the buffer go to the hasher if they
		// are its next, else it reads them back.
		r.mu.Lock()
		if r.filling == c {
			r.filling = nil
		}
		r.mu.Unlock()
		if filled > 0 {
			r.mu.Lock()
			handed := p.gen == gen && p.conn == c && r.handLocked(bufAt, bp, filled)
			behind := r.prefixLocked() > r.queued
			r.mu.Unlock()
			if handed {
				bp = nil
			}
			if behind {
				select {
				case grew <- struct{}{}:
				default:
				}
			}
		}
		if bp != nil {
			bufPool.Put(bp)
		}
	}()
	for {
		r.mu.Lock()
		if p.gen != gen || p.conn != c {
			r.mu.Unlock()
			return errTaken
		}
		end := p.end // a split may have moved it
		r.mu.Unlock()
		if off >= end {
			r.finishedPart(off-from, time.Since(c.born))
			return nil
		}
		if filled == 0 {
			bufAt = off
		}
		buf := (*bp)[filled : filled+int(min(int64(len(*bp)-filled), readSize, end-off, m.limiter.chunk()))]
		n, rerr := io.ReadFull(body, buf)
		if n > 0 {
			watchdog.Reset(m.opts.StallTimeout)
			if err := m.limiter.wait(cctx, n); err != nil {
				return context.Cause(cctx)
			}
			// A split while the bytes were on their way moved the end:
			// what lies past it is the other connection's.
			r.mu.Lock()
			n = int(min(int64(n), p.end-off))
			r.mu.Unlock()
			if n <= 0 {
				return nil
			}
			if _, err := file.WriteAt(buf[:n], off); err != nil {
				return writeErr("cannot write %s", r.d.name, err)
			}
			off += int64(n)
			filled += n
			r.mu.Lock()
			ours := p.gen == gen && p.conn == c
			prefix := r.prefixLocked()
			if ours && off > p.next {
				next := min(off, p.end)
				r.d.fl.bytes.Add(next - p.next)
				p.next = next
			}
			// A buffer at the hash's edge goes to the hasher once full
			// (or at the part's end, or the read's failure); until
			// then its bytes are the hasher's to wait for, not to read
			// back. Bytes that grew the prefix otherwise are read back.
			edge := ours && r.edgeLocked(bufAt, filled)
			flush := filled == len(*bp) || off >= p.end || rerr != nil
			if edge {
				r.filling = c
			} else if r.filling == c {
				r.filling = nil
			}
			r.mu.Unlock()
			handed := flush && edge && r.hand(cctx, c, p, gen, bufAt, bp, filled)
			r.mu.Lock()
			if flush && r.filling == c {
				r.filling = nil
			}
			behind := (flush || !edge) && r.prefixLocked() > max(prefix, r.queued)
			r.mu.Unlock()
			if flush {
				if handed {
					bp = bufPool.Get().(*[]byte)
				}
				filled = 0
			}
			if behind {
				// The prefix grew past what the hasher was handed: it
				// reads the rest back.
				select {
				case grew <- struct{}{}:
				default:
				}
			}
			c.window.Add(int64(n))
			if m.opts.Metrics != nil {
				m.opts.Metrics.MirrorFetched(int64(n))
			}
			// Start writing to disk early, so that neither a save of
			// the parts nor the fsync before the rename waits for a
			// great deal at once.
			if off-kicked >= writebackEvery || off >= end {
				startWriteback(file, kicked, off-kicked)
				kicked = off
			}
		}
		switch {
		case rerr == nil:
		case off >= end:
			r.finishedPart(off-from, time.Since(c.born))
			return nil
		case context.Cause(cctx) != nil && ctx.Err() == nil:
			return context.Cause(cctx)
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(rerr, io.EOF), errors.Is(rerr, io.ErrUnexpectedEOF):
			return retry(fmt.Errorf("the download of %s ended at byte %d, short of %d", r.d.name, off, end))
		default:
			return retry(fmt.Errorf("the download of %s broke off: %w", r.d.name, rerr))
		}
	}
}

// refusedPart sorts out why the registry gave no bytes for a part, as
// download.refused does for a single stream.
func (d *download) refusedPart(ctx context.Context, err error) error {
	var unreachable interface{ Timeout() bool }
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, hf.ErrRangeNotSatisfiable), errors.Is(err, hf.ErrUnavailable), errors.As(err, &unreachable):
		return retry(err)
	}
	if _, said := operr.As(err); said {
		return err
	}
	return retry(err)
}

// partMetrics is what a Metrics may also count of ranged fetches.
type partMetrics interface {
	MirrorPartRefetched()
	MirrorConnections(delta int)
}

// partialHave is how many bytes of a file of size (-1: not known) its
// partial file holds:
// what its saved parts count, for a ranged fetch (whose partial file has
// holes), else the partial file's size. ok is false when there is none
// that fits.
func partialHave(local string, size int64) (int64, bool) {
	st, err := os.Stat(partialPath(local))
	if err != nil || (size >= 0 && st.Size() > size) {
		return 0, false
	}
	if b, err := os.ReadFile(partsPath(local)); err == nil && len(b) <= 64<<20 {
		var s savedParts
		if json.Unmarshal(b, &s) == nil && (s.Size == size || size < 0) {
			var n int64
			for _, p := range s.Parts {
				n += max(0, min(p[2], p[1])-p[0])
			}
			return min(n, st.Size()), true
		}
	}
	return st.Size(), true
}

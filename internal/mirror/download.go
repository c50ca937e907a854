package mirror

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"modelserve/internal/operr"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"modelserve/internal/hf"
	"modelserve/internal/words"
)

// bufSize is what one read from the network may fill before the bytes go to
// the file and the hash. Large, so that a fast link costs few system calls.
const bufSize = 1 << 20

// hashDepth is how many buffers are between the network and the hash.
const hashDepth = 4

// writebackEvery is how often the bytes written so far are sent on to the
// disk rather than left for the final fsync.
const writebackEvery = 64 << 20

var bufPool = sync.Pool{New: func() any { b := make([]byte, bufSize); return &b }}

// retryable marks a failure another try may get past: a cut connection, a
// stall, a registry still busy (429, 5xx) or unreachable after the retries
// Open makes itself. Anything else ends the fetch.
type retryable struct {
	err error
}

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

func retry(err error) error { return &retryable{err: err} }

// fetchFile makes one file present and returns its sha256. It holds one of
// the mirror's download slots while it runs.
func (m *Mirror) fetchFile(ctx context.Context, fl *flight) (string, error) {
	select {
	case m.slots <- struct{}{}:
		defer func() { <-m.slots }()
	case <-ctx.Done():
		return "", ctx.Err()
	}
	fl.fetching.Store(true)
	name := path.Base(fl.file.Path)
	if err := os.MkdirAll(filepath.Dir(fl.local), 0o755); err != nil {
		return "", writeErr("cannot make a folder for %s", name, err)
	}
	if sum, ok, err := adopt(ctx, fl); err != nil || ok {
		return sum, err
	}
	if sum, ok, err := m.fromHFCache(ctx, fl); err != nil || ok {
		return sum, err
	}

	d := &download{m: m, fl: fl, name: name, part: partialPath(fl.local), h: sha256.New(), ranges: m.rangedFor(fl.file)}
	stop := fl.meter()
	defer stop()
	for try := 1; ; try++ {
		err := d.try(ctx)
		if err == nil {
			return d.finish()
		}
		if ctx.Err() != nil {
			// The partial file stays: the next Fetch continues it.
			return "", ctx.Err()
		}
		var r *retryable
		if !errors.As(err, &r) {
			return "", err
		}
		if try > m.opts.MaxRetries {
			kind := operr.Unavailable
			if oe, ok := operr.As(r.err); ok {
				kind = oe.Kind
			}
			return "", operr.Wrap(kind, r.err, "%s could not be fetched in %s: %s", name, words.Count(try, "try", "tries"), r.err)
		}
		wait := backoff(m.opts.Backoff, try)
		m.log.Info("mirror retrying a fetch", "model", fl.file.Model, "path", fl.file.Path,
			"try", try, "wait", wait, "err", r.err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return "", ctx.Err()
		}
	}
}

// backoff is the wait before retry number try (from 1): base, doubled for
// each further one, at most a minute.
func backoff(base time.Duration, try int) time.Duration {
	wait := base
	for i := 1; i < try && wait < time.Minute; i++ {
		wait *= 2
	}
	return min(wait, time.Minute)
}

// meter keeps the flight's rate, once a second, until stop is called.
func (fl *flight) meter() (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last := fl.bytes.Load()
		for {
			select {
			case <-done:
				fl.rate.Store(0)
				return
			case <-t.C:
				now := fl.bytes.Load()
				fl.rate.Store(max(now-last, 0))
				last = now
			}
		}
	}()
	return func() { close(done) }
}

// adopt takes a whole file already in place that has no verified sha256
// beside it (put there by hand, or left by a crash between the rename and
// the sidecar) by hashing it once: reading the disk is cheaper than the
// registry. A file that does not match is left for the fetch to replace.
func adopt(ctx context.Context, fl *flight) (string, bool, error) {
	f := fl.file
	st, err := os.Stat(fl.local)
	if err != nil || !st.Mode().IsRegular() || st.Size() != f.Size {
		return "", false, nil
	}
	if sum, err := readSidecar(fl.local); err == nil {
		return sum, f.SHA256 == "" || strings.EqualFold(sum, f.SHA256), nil
	}
	file, err := os.Open(fl.local)
	if err != nil {
		return "", false, nil
	}
	defer file.Close()
	h := sha256.New()
	if err := hashInto(ctx, h, file, st.Size()); err != nil {
		return "", false, fmt.Errorf("cannot read %s on the mirror: %w", path.Base(f.Path), err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if f.SHA256 != "" && !strings.EqualFold(sum, f.SHA256) {
		return "", false, nil
	}
	if err := writeSidecar(fl.local, sum); err != nil {
		return "", false, err
	}
	fl.bytes.Store(f.Size)
	return sum, true, nil
}

// download is one file's fetch across its tries. The hash always covers
// exactly the first hashed bytes of the partial file, so a try that follows
// a cut continues both the file and the hash without reading anything again.
type download struct {
	m      *Mirror
	fl     *flight
	name   string // the file's last path element, as sentences name it
	part   string
	h      hash.Hash
	hashed int64
	// ranges fetches the file in parts over several connections; r is
	// the parts, once set up.
	ranges bool
	r      *ranged
}

// try makes one request for the bytes the partial file lacks and writes
// them. nil means the partial file is whole (not yet verified).
func (d *download) try(ctx context.Context) error {
	f := d.fl.file
	file, err := os.OpenFile(d.part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return writeErr("cannot write %s", d.name, err)
	}
	defer file.Close()
	if d.ranges {
		if err := d.tryRanges(ctx, file); !errors.Is(err, errNoRanges) {
			return err
		}
	}
	have, err := d.resume(ctx, file)
	if err != nil {
		return err
	}
	if have == f.Size && have > 0 {
		return nil
	}
	d.fl.conns.Store(1)
	defer d.fl.conns.Store(0)

	// The watchdog cancels the try when no byte arrives for StallTimeout,
	// whether waiting for the answer or for the body.
	stall := d.m.opts.StallTimeout
	tctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watchdog := time.AfterFunc(stall, func() { cancel(errStalled) })
	defer watchdog.Stop()

	body, err := d.m.opts.Registry.Open(tctx, f.URL, have, 0)
	if err != nil {
		return d.refused(tctx, file, err)
	}
	defer body.Close()
	switch {
	case body.Offset == have:
	case body.Offset == 0:
		// The registry ignored the Range and sends the whole file:
		// appending it to the partial one would make a file twice too long.
		if err := d.restart(file); err != nil {
			return err
		}
		have = 0
	default:
		// Not the bytes asked for: start over rather than guess.
		if err := d.restart(file); err != nil {
			return err
		}
		return retry(fmt.Errorf("the registry answered the request for %s from byte %d with bytes from %d",
			d.name, have, body.Offset))
	}
	if body.Size >= 0 && body.Size != f.Size {
		d.discard()
		return sizeMismatch(d.name, body.Size, f.Size)
	}
	if _, err := file.Seek(have, io.SeekStart); err != nil {
		return writeErr("cannot write %s", d.name, err)
	}
	return d.copy(tctx, file, body, have, watchdog)
}

// tryRanges fetches the file in parts. A registry that turns out not to
// serve Range leaves errNoRanges, with the partial file cut back to the
// prefix the hash covers, for the single stream to carry on from.
func (d *download) tryRanges(ctx context.Context, file *os.File) error {
	if d.r == nil {
		r, err := d.newRanged(ctx, file)
		if err != nil {
			return err
		}
		d.r = r
	}
	err := d.r.try(ctx, file)
	if !errors.Is(err, errNoRanges) {
		return err
	}
	d.m.log.Info("mirror fetching in one stream: the registry does not serve Range", "path", d.fl.file.Path)
	d.ranges = false
	hashed := d.r.hashed
	d.r = nil
	if err := file.Truncate(hashed); err != nil {
		return writeErr("cannot write %s", d.name, err)
	}
	os.Remove(partsPath(d.fl.local))
	d.hashed = hashed
	return errNoRanges
}

// refused sorts out why the registry gave no bytes: what another try may
// get past, and what the operator must hear about (the registry's own
// sentence: a gated repository, a missing file).
func (d *download) refused(tctx context.Context, file *os.File, err error) error {
	var unreachable *url.Error
	switch {
	case context.Cause(tctx) != nil:
		return d.broke(tctx, err)
	case errors.Is(err, hf.ErrRangeNotSatisfiable):
		// The registry's file is shorter than the partial one; the next
		// try asks for all of it and the size check says what is wrong.
		if err := d.restart(file); err != nil {
			return err
		}
		return retry(err)
	case errors.Is(err, hf.ErrUnavailable), errors.As(err, &unreachable):
		return retry(err)
	}
	if _, said := operr.As(err); said {
		// The registry refuses the file (gone, gated, not for this
		// token): bytes kept for a resume that cannot come would only
		// take room on the disk.
		d.discard()
	}
	return err
}

// copy writes the body to the file as it arrives and hashes it beside: one
// goroutine hashes a buffer while this one reads and writes the next, so on
// a machine with a core to spare the sha256 costs no time. The hashing
// goroutine ends before copy returns, and then the hash covers exactly the
// bytes written.
func (d *download) copy(tctx context.Context, file *os.File, body io.Reader, have int64, watchdog *time.Timer) (err error) {
	size := d.fl.file.Size
	free := make(chan *[]byte, hashDepth)
	full := make(chan []byte, hashDepth)
	for range hashDepth {
		free <- bufPool.Get().(*[]byte)
	}
	tooLong := false
	hashed := make(chan struct{})
	go func() {
		defer close(hashed)
		for b := range full {
			d.h.Write(b)
			free <- &b
		}
	}()
	defer func() {
		close(full)
		<-hashed
		for range hashDepth {
			b := <-free
			*b = (*b)[:cap(*b)]
			bufPool.Put(b)
		}
		d.hashed = have
		if tooLong {
			d.discard() // after the hashing has stopped: it resets the hash
		}
	}()

	kicked := have // bytes already handed to the disk's writeback
	for {
		bp := <-free
		buf := (*bp)[:min(int64(cap(*bp)), d.m.limiter.chunk())]
		n, rerr := body.Read(buf)
		if n > 0 {
			if err := d.m.limiter.wait(tctx, n); err != nil {
				free <- bp
				return d.broke(tctx, err)
			}
		}
		if n == 0 {
			free <- bp
		} else {
			watchdog.Reset(d.m.opts.StallTimeout)
			if have+int64(n) > size {
				free <- bp
				tooLong = true
				return operr.New(operr.Refused, "%s arrived longer than the %d bytes the registry published; it was deleted", d.name, size)
			}
			if _, err := file.Write(buf[:n]); err != nil {
				free <- bp
				return writeErr("cannot write %s", d.name, err)
			}
			full <- buf[:n]
			have += int64(n)
			if d.m.opts.Metrics != nil {
				d.m.opts.Metrics.MirrorFetched(int64(n))
			}
			d.fl.bytes.Store(have)
			// Start writing to disk early, so that the fsync before the
			// rename does not wait for the whole file at once.
			if have-kicked >= writebackEvery {
				startWriteback(file, kicked, have-kicked)
				kicked = have
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return d.broke(tctx, rerr)
		}
	}
	if have < size {
		return retry(fmt.Errorf("the download of %s ended at byte %d of %d", d.name, have, size))
	}
	return nil
}

// resume sizes up the partial file: one longer than the file can be is
// emptied, and bytes the hash has not seen (a partial file from before this
// flight) are read through it once. It returns the bytes kept.
func (d *download) resume(ctx context.Context, file *os.File) (int64, error) {
	st, err := file.Stat()
	if err != nil {
		return 0, fmt.Errorf("cannot read %s on the mirror: %w", d.name, err)
	}
	have := st.Size()
	if have > d.fl.file.Size {
		return 0, d.restart(file)
	}
	if have != d.hashed {
		d.h.Reset()
		d.hashed = 0
		if err := hashInto(ctx, d.h, file, have); err != nil {
			return 0, fmt.Errorf("cannot read the partial %s on the mirror: %w", d.name, err)
		}
		d.hashed = have
	}
	d.fl.bytes.Store(have)
	return have, nil
}

// restart empties the partial file and the hash.
func (d *download) restart(file *os.File) error {
	os.Remove(partsPath(d.fl.local))
	d.r = nil
	d.h.Reset()
	d.hashed = 0
	d.fl.bytes.Store(0)
	if err := file.Truncate(0); err != nil {
		return writeErr("cannot write %s", d.name, err)
	}
	return nil
}

// discard deletes the partial file of a download that cannot succeed, so
// that nothing half-right is left to be continued.
func (d *download) discard() {
	os.Remove(partsPath(d.fl.local))
	d.r = nil
	d.h.Reset()
	d.hashed = 0
	d.fl.bytes.Store(0)
	os.Remove(d.part)
}

// broke explains a failed request or read.
func (d *download) broke(tctx context.Context, err error) error {
	if errors.Is(context.Cause(tctx), errStalled) {
		return retry(fmt.Errorf("no byte of %s arrived for %s", d.name, d.m.opts.StallTimeout))
	}
	if tctx.Err() != nil {
		return err // the caller's cancellation: fetchFile stops
	}
	return retry(fmt.Errorf("the download of %s broke off: %w", d.name, err))
}

// finish checks the whole partial file and puts it in place: synced first,
// so that the name never points at bytes still only in memory; then the
// sidecar, so that the sha256 is known without reading gigabytes again.
func (d *download) finish() (string, error) {
	f, local := d.fl.file, d.fl.local
	sum := hex.EncodeToString(d.h.Sum(nil))
	if f.SHA256 != "" && !strings.EqualFold(sum, f.SHA256) {
		d.discard()
		return "", mismatch(f.Path, sum, f.SHA256)
	}
	if err := syncFile(d.part); err != nil {
		return "", writeErr("cannot write %s", d.name, err)
	}
	// An old sidecar would vouch for the new file if a crash came before
	// the new one is written; without one, the file is hashed again.
	if err := os.Remove(sidecarPath(local)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", writeErr("cannot replace %s", d.name, err)
	}
	// Without its parts the whole partial file reads as a prefix: a crash
	// here costs one hash of it, nothing fetched again.
	if err := os.Remove(partsPath(local)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", writeErr("cannot replace %s", d.name, err)
	}
	if err := os.Rename(d.part, local); err != nil {
		return "", writeErr("cannot put %s in place", d.name, err)
	}
	if err := writeSidecar(local, sum); err != nil {
		return "", err
	}
	return sum, nil
}

// hashInto feeds the first n bytes of file to h, stopping when ctx is done:
// a 40 GB partial file takes a while to read.
func hashInto(ctx context.Context, h hash.Hash, file *os.File, n int64) error {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for off := int64(0); off < n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		k, err := file.ReadAt(buf[:min(int64(len(buf)), n-off)], off)
		h.Write(buf[:k])
		off += int64(k)
		if err != nil && !(errors.Is(err, io.EOF) && off == n) {
			return err
		}
	}
	return nil
}

// The sidecar is a line as sha256sum writes it, so `sha256sum -c` reads it.
func writeSidecar(local, sum string) error {
	side := sidecarPath(local)
	tmp := side + tmpSuffix
	line := sum + "  " + filepath.Base(local) + "\n"
	if err := os.WriteFile(tmp, []byte(line), 0o644); err != nil {
		return writeErr("cannot record the sha256 of %s", filepath.Base(local), err)
	}
	if err := syncFile(tmp); err != nil {
		os.Remove(tmp)
		return writeErr("cannot record the sha256 of %s", filepath.Base(local), err)
	}
	if err := os.Rename(tmp, side); err != nil {
		os.Remove(tmp)
		return writeErr("cannot record the sha256 of %s", filepath.Base(local), err)
	}
	// Renames are only durable once the folder is; a filesystem that
	// cannot sync a folder loses nothing worse than a rehash.
	if dir, err := os.Open(filepath.Dir(local)); err == nil {
		dir.Sync()
		dir.Close()
	}
	return nil
}

// readSidecar returns the verified sha256 recorded beside a file.
func readSidecar(local string) (string, error) {
	b, err := os.ReadFile(sidecarPath(local))
	if err != nil {
		return "", err
	}
	sum, _, _ := strings.Cut(string(b), " ")
	if len(sum) != 64 || !sha256Pattern.MatchString(sum) {
		return "", fmt.Errorf("the sha256 recorded for %s is unreadable", filepath.Base(local))
	}
	return strings.ToLower(sum), nil
}

func syncFile(name string) error {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeErr is a failure to write a file of the mirror, what being a
// format naming it ("cannot write %s"). A full disk is the operator's to
// fix, and is said so in a sentence: "no space left on device" and a path
// on this machine told them nothing they could act on. What was fetched
// stays: once there is room, a retry carries on from it.
func writeErr(what, name string, err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return operr.Wrap(operr.Unavailable, err, "the mirror's disk is full: %s could not be written; "+
			"free some space (the mirror page removes files), or give --data a larger disk, then retry the job: "+
			"what was fetched so far is kept", name)
	}
	return fmt.Errorf(what+" on the mirror: %w", name, err)
}

func sizeMismatch(name string, got, want int64) error {
	return operr.New(operr.Refused, "%s is %d bytes at the registry, and the registry published %d; it was not kept", name, got, want)
}
